"""Which variables are secret (by name, by a URL password in the value, by mark, by reuse of a secret's value),
and which parts of a secret value must be looked for in what the ranks print."""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import unquote

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
#: Free text is searched for known secret values only when they are at least this long: a one- to three-letter
#: value would match half of any text. Shorter secrets are kept out of files by name, and the plan's checks
#: warn about each (what the ranks print of them cannot be redacted).
MIN_TEXT_MATCH = 4

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
_SCHEME = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://")
#: Where a URL ends in free text: white space, quotes, angle brackets (so `<redacted>` is never re-read).
_TEXT_URL_END = re.compile(r"[\s\"'<>`]")
#: `host:5000/path@...` (an image reference with a digest): a port and a path, not a password.
_PORT_PATH = re.compile(r"\d{1,5}/")


def name_parts(name: str) -> list[str]:
    """`apiKey_v2` -> ['API', 'KEY', 'V2']."""
    return [part for part in _SEPARATORS.split(_CAMEL.sub(r"\1_\2", name).upper()) if part]


def is_secret_name(name: str) -> bool:
    if name.upper() in NOT_SECRET:
        return False
    return any(part in SECRET_PARTS or part.endswith(SECRET_SUFFIXES) for part in name_parts(name))


def _userinfo_end(rest: str) -> int | None:
    """Where the user information of `rest` (a URL after `scheme://`) ends: its last `@` before the first `/`
    (RFC 3986, as urllib reads it), else the first `@` after it (a password with a `/` that was not
    percent-encoded), extended over further `@`s of the same path segment. None without an `@`."""
    slash = rest.find("/")
    head = rest if slash < 0 else rest[:slash]
    if "@" in head:
        return head.rindex("@")
    at = rest.find("@")
    if at < 0:
        return None
    after = rest.find("/", at + 1)
    more = rest.rfind("@", at + 1, len(rest) if after < 0 else after)
    return more if more >= 0 else at


def _password_span(rest: str) -> tuple[int, int] | None:
    """(start, end) of the password in `rest` (a URL after `scheme://`), None when it carries none."""
    at = _userinfo_end(rest)
    if at is None:
        return None
    colon = rest.find(":", 0, at)
    if colon < 0 or "/" in rest[:colon]:
        return None
    password = rest[colon + 1:at]
    if not password or _PORT_PATH.match(password):  # only a password past the first `/` can look so
        return None
    return colon + 1, at


def url_password_spans(text: str, whole: bool = False) -> Iterator[tuple[int, int]]:
    """Spans of URL passwords (`scheme://user:PASSWORD@host`) in `text`. In free text a URL ends at white space
    or a quote; `whole`: `text` is one value (a variable's, a command-line word's), so the password may hold
    spaces too (a URL ends at a line's end)."""
    position = 0
    while True:
        match = _SCHEME.search(text, position)
        if match is None:
            return
        start = match.end()
        end = text.find("\n", start) if whole else -1
        if not whole:
            stop = _TEXT_URL_END.search(text, start)
            end = -1 if stop is None else stop.start()
        end = len(text) if end < 0 else end
        span = _password_span(text[start:end])
        if span is not None:
            yield start + span[0], start + span[1]
            position = start + span[1]
        else:
            position = start


def has_url_password(value: str) -> bool:
    return next(url_password_spans(value, whole=True), None) is not None


def redact_url_passwords(text: str, whole: bool = False) -> str:
    spans = list(url_password_spans(text, whole))
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    return text


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


def secret_parts(value: str) -> list[str]:
    """What of a secret value is looked for in printed text: the value, and for every URL password in it the
    password (as written and percent-decoded) and `user:password` (what HTTP basic authentication encodes)."""
    parts = [value]
    for start, end in url_password_spans(value, whole=True):
        password = value[start:end]
        user_start = max(value.rfind("/", 0, start), value.rfind("\n", 0, start)) + 1
        parts += [password, unquote(password), value[user_start:end]]
    return list(dict.fromkeys(part for part in parts if part))


def short_secrets(env: Mapping[str, str], names: Iterable[str]) -> list[tuple[str, str, int]]:
    """(name, 'value' or 'URL password', length) of every secret whose value, or the password in it, is too
    short (under MIN_TEXT_MATCH characters) to be told from other text where a rank prints it."""
    out = []
    for name in sorted(names):
        value = env.get(name) or ""
        if 0 < len(value) < MIN_TEXT_MATCH:
            out.append((name, "value", len(value)))
            continue
        for start, end in url_password_spans(value, whole=True):
            if end - start < MIN_TEXT_MATCH:
                out.append((name, "URL password", end - start))
    return out
