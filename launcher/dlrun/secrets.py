"""The one rule for secrets: which variables are secret, and how their values are kept out of every file, store
row and printed line.

A variable is secret when its NAME has a secret word as one of its parts (`HF_TOKEN`, `GITHUB_PAT`,
`DB_PASS`, `apiKey`), when its VALUE is a URL carrying a password (`postgres://user:pw@db/x`), or when the
user marks it (`--secret-env NAME`). Names are split into parts at `_`, `-`, `.` and lower-to-upper case
changes, so `KEY` matches `AWS_ACCESS_KEY_ID` but not `MONKEY` or `KEYBOARD_LAYOUT`.

Secret values reach the ranks through the environment of the job, never as text: rendered scripts refer to
them by name (`${HF_TOKEN}`), and every capture (plan, environment, argv, store) shows `<redacted>`.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"

#: Name parts that make a variable secret wherever they appear as a whole part.
SECRET_PARTS = frozenset({
    "TOKEN", "TOKENS", "SECRET", "SECRETS",
    "PASSWORD", "PASSWORDS", "PASSWD", "PWD", "PASS", "PASSPHRASE",
    "PAT", "JWT",
    "KEY", "KEYS", "APIKEY", "PRIVKEY",
    "CREDENTIAL", "CREDENTIALS", "CRED", "CREDS",
    "AUTH", "OAUTH", "AUTHORIZATION",
    "COOKIE", "COOKIES", "SESSION", "WEBHOOK", "WEBHOOKS", "PRIVATE",
})
#: Long words that also count at the end of a longer part (`ACCESSTOKEN`, `PGPASSWORD`, `SLACKWEBHOOK`).
#: Short words (`KEY`, `PAT`, `PWD`, `PASS`, `AUTH`) count only as whole parts: `MONKEY`, `BYPASS`.
SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "CREDENTIALS", "WEBHOOK",
                   "COOKIE")
#: Names with a secret-looking part that are not secrets: the shell's working directories.
NOT_SECRET = frozenset({"PWD", "OLDPWD"})

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
#: `scheme://[user]:password@` — the password is the part between `:` and `@`.
URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)(?P<password>[^\s/@]+)(?P<at>@)")
#: Free text is searched for known secret values only when they are at least this long: a one- or two-letter
#: value would match half of any text. Values are kept out of files by construction; this is a second net.
MIN_TEXT_MATCH = 4


def name_parts(name: str) -> list[str]:
    """`apiKey_v2` -> ['API', 'KEY', 'V2']."""
    return [part for part in _SEPARATORS.split(_CAMEL.sub(r"\1_\2", name).upper()) if part]


def is_secret_name(name: str) -> bool:
    if name.upper() in NOT_SECRET:
        return False
    return any(part in SECRET_PARTS or part.endswith(SECRET_SUFFIXES) for part in name_parts(name))


def has_url_password(value: str) -> bool:
    return bool(URL_PASSWORD.search(value))


def is_secret(name: str, value: str, marked: Iterable[str] = ()) -> bool:
    return name in set(marked) or is_secret_name(name) or has_url_password(value)


def secret_names(env: Mapping[str, str], marked: Iterable[str] = ()) -> set[str]:
    """The names in `env` whose values must never be written."""
    marked = set(marked)
    return {name for name, value in env.items() if is_secret(name, value, marked)}


def redact_url_passwords(text: str) -> str:
    return URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def redact_text(text: str, values: Iterable[str] = ()) -> str:
    """`text` with every known secret value (of at least MIN_TEXT_MATCH characters) and every URL password
    replaced by `<redacted>`."""
    for value in sorted({v for v in values if len(v) >= MIN_TEXT_MATCH}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return redact_url_passwords(text)


def redact_env(env: Mapping[str, str], marked: Iterable[str] = (), values: Iterable[str] = ()) -> dict[str, str]:
    """`env` (sorted by name) with the value of every secret variable, and every value equal to a known
    secret value, replaced by `<redacted>`."""
    marked, known = set(marked), {v for v in values if v}
    return {name: REDACTED if is_secret(name, value, marked) or value in known else value
            for name, value in sorted(env.items())}


#: Command-line options whose argument is `NAME=VALUE` (dlrun's `--env`/`--secret-env`, docker's `-e`).
ENV_OPTIONS = ("--env", "-e", "--secret-env")


def _redact_assignment(word: str, marked: set[str], force: bool) -> str:
    name, sep, value = word.partition("=")
    if sep and (force or is_secret(name, value, marked)):
        return f"{name}={REDACTED}"
    return word


def redact_argv(argv: Iterable[str], marked: Iterable[str] = (), values: Iterable[str] = ()) -> list[str]:
    """A command line as it may be recorded: the value of every secret `NAME=VALUE` word (and every value
    given to `--secret-env`) replaced, then known secret values and URL passwords in any word."""
    marked, known = set(marked), list(values)
    out: list[str] = []
    previous = ""
    for word in argv:
        option, eq, rest = word.partition("=")
        if previous in ENV_OPTIONS:
            word = _redact_assignment(word, marked, previous == "--secret-env")
        elif eq and option in ENV_OPTIONS and option.startswith("--"):
            word = f"{option}={_redact_assignment(rest, marked, option == '--secret-env')}"
        elif eq and not word.startswith("-"):
            word = _redact_assignment(word, marked, False)
        out.append(redact_text(word, known))
        previous = word
    return out
