"""The one rule for secrets: which variables are secret, and how their values are kept out of every file, store
row and printed line.

A variable is secret when its NAME has a secret word as one of its parts (`HF_TOKEN`, `GITHUB_PAT`,
`DB_PASS`, `apiKey`), when its VALUE is a URL carrying a password (`postgres://user:pw@db/x`), when the
user marks it (`--secret-env NAME`), or when its value is the value of a secret variable (`COPY=$HF_TOKEN`
passed again under a harmless name; `reused_secret_names` finds those among dlrun's own environment too).
Names are split into parts at `_`, `-`, `.` and lower-to-upper case changes, so `KEY` matches
`AWS_ACCESS_KEY_ID` but not `MONKEY` or `KEYBOARD_LAYOUT`.

Secret values reach the ranks through the environment of the job, never as text: rendered scripts refer to
them by name (`${HF_TOKEN}`), and every capture (plan, environment, argv, store) shows `<redacted>`. What a
rank or tool prints is the second net: `redact_text`/`redact_data` take the run's known values out of failure
reasons, status files, results and the terminal, and `redact_file` out of the run directory's logs.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

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
    """The names in `env` whose values must never be written: secret by the rules above, or holding the
    value of one that is."""
    marked = set(marked)
    names = {name for name, value in env.items() if is_secret(name, value, marked)}
    values = {env[name] for name in names if env[name]}
    return names | {name for name, value in env.items() if value in values}


def reused_secret_names(env: Mapping[str, str], environ: Mapping[str, str]) -> set[str]:
    """Names in `env` (a job's variables) whose value is the value of a secret variable of `environ`
    (dlrun's own environment): `--env COPY=$HF_TOKEN` is as secret as HF_TOKEN."""
    values = {value for name, value in environ.items() if value and is_secret(name, value)}
    return {name for name, value in env.items() if value in values}


def plan_secret_values(plan: Any) -> list[str]:
    """The values of a plan's secret variables (anything with `env` and `secret_names`)."""
    return [plan.env[name] for name in sorted(plan.secret_names) if plan.env.get(name)]


def plan_redactor(plan: Any) -> Callable[[str], str]:
    """`redact_text` with the values of `plan`'s secret variables: for what its ranks print."""
    values = plan_secret_values(plan)
    return lambda text: redact_text(text, values)


def redact_url_passwords(text: str) -> str:
    return URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def redact_text(text: str, values: Iterable[str] = ()) -> str:
    """`text` with every known secret value (of at least MIN_TEXT_MATCH characters) and every URL password
    replaced by `<redacted>`."""
    for value in sorted({v for v in values if len(v) >= MIN_TEXT_MATCH}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return redact_url_passwords(text)


def redact_data(data: Any, values: Iterable[str] = ()) -> Any:
    """`data` (JSON-like: dicts, lists, strings, numbers) with `redact_text` applied to every string in it,
    keys included."""
    values = list(values)
    if isinstance(data, str):
        return redact_text(data, values)
    if isinstance(data, Mapping):
        return {redact_data(key, values): redact_data(value, values) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(item, values) for item in data]
    return data


_FILE_CHUNK = 1 << 20


def redact_file(path: Path, values: Iterable[str]) -> bool:
    """Rewrite the file at `path` with every known secret value (as `redact_text` picks them) replaced, read
    and written in chunks, atomically (same mode); untouched when it holds none. True when it was rewritten."""
    needles = sorted({v.encode() for v in values if len(v) >= MIN_TEXT_MATCH}, key=len, reverse=True)
    if not needles:
        return False
    keep = max(len(n) for n in needles) - 1  # a value cut by a chunk's end is found with the next chunk
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".redact")
    changed = False
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as out:
            carry = b""
            while True:
                chunk = source.read(_FILE_CHUNK)
                data = carry + chunk
                for needle in needles:
                    if needle in data:
                        data, changed = data.replace(needle, REDACTED.encode()), True
                if not chunk:
                    out.write(data)
                    break
                cut = max(len(data) - keep, 0)
                out.write(data[:cut])
                carry = data[cut:]
        if changed:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return changed


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
