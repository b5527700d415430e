"""The forms a secret value takes when a program prints it: as it is, JSON-escaped, percent-encoded, shell-quoted,
Python-escaped, HTML-escaped, base64-encoded. What the ranks print is searched for every form of every part of
every secret value (`dlrun.secrets.rules.secret_parts`), in memory while dlrun knows the values and through
their keyed fingerprints (`dlrun.secrets.prints`) after a dlrun that knew them died."""
from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Iterable
from functools import lru_cache
from urllib.parse import quote, quote_plus

from dlrun.secrets.rules import MIN_TEXT_MATCH, secret_parts
from dlrun.text import html_forms

_JSON_HEX = re.compile(r"\\u([0-9a-f]{4})")
_PERCENT_HEX = re.compile(r"%([0-9A-F]{2})")
#: What bash's `printf %q` (and `${VAR@Q}`'s backslash form) puts a backslash before; `~` and `#` only first.
_SHELL_SPECIAL = re.compile(r"""([ !"$&'()*,;<>?\[\\\]^`{|}])""")
_ANSI_C_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
                 "\x1b": "\\E", "\\": "\\\\", "'": "\\'"}


def _json_forms(value: str) -> list[str]:
    ascii_form = json.dumps(value)[1:-1]
    forms = [ascii_form, json.dumps(value, ensure_ascii=False)[1:-1],
             _JSON_HEX.sub(lambda m: "\\u" + m.group(1).upper(), ascii_form)]  # Java's and .NET's hex case
    return forms + [form.replace("/", "\\/") for form in forms if "/" in form]  # PHP's json_encode


def _url_forms(value: str) -> list[str]:
    bytes_of = {"encoding": "utf-8", "errors": "surrogateescape"}  # a variable's undecodable bytes, as they are
    forms = [quote(value, safe="", **bytes_of), quote(value, **bytes_of), quote_plus(value, **bytes_of),
             quote(value, safe="~!*()'", **bytes_of)]  # the last as JavaScript's encodeURIComponent
    return forms + [_PERCENT_HEX.sub(lambda m: "%" + m.group(1).lower(), form) for form in forms]


def _ansi_c(value: str, keep_wide: bool) -> str:
    """The inside of bash's `$'...'` (printf %q of a value with control characters, or any non-ASCII one in
    the C locale): named and octal escapes of the UTF-8 bytes."""
    out = []
    for char in value:
        if char in _ANSI_C_NAMED:
            out.append(_ANSI_C_NAMED[char])
        elif " " <= char <= "~" or (keep_wide and char > "\x7f" and char.isprintable()):
            out.append(char)
        else:
            out.extend("\\%03o" % byte for byte in char.encode("utf-8", "surrogateescape"))
    return "".join(out)


def _shell_forms(value: str) -> list[str]:
    backslashed = _SHELL_SPECIAL.sub(r"\\\1", value)
    if backslashed[:1] in ("~", "#"):
        backslashed = "\\" + backslashed
    return [shlex.quote(value), value.replace("'", "'\"'\"'"), value.replace("'", "'\\''"), backslashed,
            _ansi_c(value, keep_wide=False), _ansi_c(value, keep_wide=True)]


def _base64_forms(value: str) -> list[str]:
    """The base64 of the value where it starts a base64 text (its whole 3-byte groups: what follows the value
    cannot change them), in both alphabets."""
    data = value.encode("utf-8", "surrogateescape")
    whole = data[:len(data) - len(data) % 3]
    return [base64.b64encode(whole).decode(), base64.urlsafe_b64encode(whole).decode()] if whole else []


@lru_cache(maxsize=4096)
def forms(value: str) -> tuple[str, ...]:
    """Every form of `value` worth looking for (the value first, then longest first; each once)."""
    found = [value, *_json_forms(value), *_url_forms(value), *_shell_forms(value), repr(value)[1:-1],
             ascii(value)[1:-1], *html_forms(value), *_base64_forms(value)]
    rest = sorted({form for form in found[1:] if form and form != value}, key=lambda f: (-len(f), f))
    return (value, *rest)


def needles(values: Iterable[str]) -> list[str]:
    """Every form of every part of the given secret values, each at least MIN_TEXT_MATCH characters long (a
    part shorter than that is not looked for: it would match ordinary text), longest first."""
    out: set[str] = set()
    for value in values:
        for part in secret_parts(value):
            if len(part) >= MIN_TEXT_MATCH:
                out.update(form for form in forms(part) if len(form) >= MIN_TEXT_MATCH)
    return sorted(out, key=lambda f: (-len(f), f))
