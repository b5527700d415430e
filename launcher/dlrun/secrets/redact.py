"""Taking secrets out of text, data, files, environments and command lines.

One `Redactor` for every output: it finds the spans to replace with a matcher, either the run's known secret
values (every form of every part of them, `dlrun.secrets.forms`) while dlrun holds them, or their keyed
fingerprints (`dlrun.secrets.prints`) once it does not, and replaces each span with `<redacted>`. Text (not
files) also loses every URL password (`scheme://user:<redacted>@host`), known or not.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from dlrun.secrets.forms import needles
from dlrun.secrets.rules import REDACTED, is_secret, redact_url_passwords

AnyStr = TypeVar("AnyStr", str, bytes)
_FILE_CHUNK = 1 << 20


class Matcher(Protocol):
    #: the longest span it finds (a span cut by a chunk's end is found with the next chunk)
    longest: int

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        """(start, end) of every secret form in `data`, overlapping ones included."""


class KnownForms:
    """Spans of the given secret values' forms (found by searching for each)."""

    def __init__(self, values: Iterable[str]):
        self.forms = needles(values)
        self._bytes = [form.encode("utf-8", "surrogateescape") for form in self.forms]
        self.longest = max((len(form) for form in self._bytes), default=0)

    def spans(self, data: AnyStr) -> list[tuple[int, int]]:
        found = []
        for form in (self.forms if isinstance(data, str) else self._bytes):
            at = data.find(form)
            while at >= 0:
                found.append((at, at + len(form)))
                at = data.find(form, at + 1)
        return found


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _replaced(data: AnyStr, spans: list[tuple[int, int]]) -> AnyStr:
    mark = REDACTED if isinstance(data, str) else REDACTED.encode()
    parts, position = [], 0
    for start, end in spans:
        parts += [data[position:start], mark]
        position = end
    parts.append(data[position:])
    return data[:0].join(parts)


class Redactor:
    def __init__(self, matcher: Matcher):
        self.matcher = matcher

    @classmethod
    def known(cls, values: Iterable[str]) -> "Redactor":
        return cls(KnownForms(values))

    @property
    def active(self) -> bool:
        return self.matcher.longest > 0

    def text(self, text: str) -> str:
        """`text` without the secret forms and without URL passwords."""
        if self.active:
            spans = self.matcher.spans(text) if isinstance(self.matcher, KnownForms) else _text_spans(self, text)
            text = _replaced(text, _merged(spans))
        return redact_url_passwords(text)

    def data(self, data: Any) -> Any:
        """`data` (JSON-like) with `text` applied to every string in it, keys included."""
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, Mapping):
            return {self.data(key): self.data(value) for key, value in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.data(item) for item in data]
        return data

    def stream(self, source, out, chunk_bytes: int = _FILE_CHUNK) -> bool:
        """Copy binary file `source` to `out` without the secret forms, in chunks; True when it held any."""
        keep = max(self.matcher.longest - 1, 0)
        carry, changed = b"", False
        while True:
            chunk = source.read(chunk_bytes)
            data = carry + chunk
            spans = _merged(self.matcher.spans(data))
            cut = len(data) if not chunk else max(len(data) - keep, 0)
            done = [(start, end) for start, end in spans if start < cut]  # later ones wait for the next chunk
            cut = max([cut, *(end for _, end in done)])
            changed = changed or bool(done)
            out.write(_replaced(data[:cut], done))
            carry = data[cut:]
            if not chunk:
                return changed

    def file(self, path: Path) -> bool:
        """Rewrite the file at `path` without the secret forms, atomically (same mode); untouched when it holds
        none. True when it was rewritten."""
        if not self.active:
            return False
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".redact")
        try:
            with open(path, "rb") as source, os.fdopen(fd, "wb") as out:
                changed = self.stream(source, out)
            if changed:
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
                os.replace(tmp, path)
            else:
                os.unlink(tmp)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return changed


def _text_spans(redactor: Redactor, text: str) -> list[tuple[int, int]]:
    """A byte matcher's spans in `text`, as character offsets."""
    data = text.encode("utf-8", "surrogateescape")
    spans = redactor.matcher.spans(data)
    if not spans:
        return []
    offsets = {}
    for position in {p for span in spans for p in span}:
        offsets[position] = len(data[:position].decode("utf-8", "surrogateescape"))
    return [(offsets[start], offsets[end]) for start, end in spans]


def plan_secret_values(plan: Any) -> list[str]:
    """The values of a plan's secret variables (anything with `env` and `secret_names`)."""
    return [plan.env[name] for name in sorted(plan.secret_names) if plan.env.get(name)]


def plan_redactor(plan: Any) -> Callable[[str], str]:
    """`redact_text` with the values of `plan`'s secret variables: for what its ranks print."""
    return Redactor.known(plan_secret_values(plan)).text


def redact_text(text: str, values: Iterable[str] = ()) -> str:
    """`text` with every form of every known secret value (of at least MIN_TEXT_MATCH characters) and every URL
    password replaced by `<redacted>`."""
    return Redactor.known(values).text(text)


def redact_data(data: Any, values: Iterable[str] = ()) -> Any:
    """`data` (JSON-like: dicts, lists, strings, numbers) with `redact_text` applied to every string in it,
    keys included."""
    return Redactor.known(values).data(data)


def redact_file(path: Path, values: Iterable[str]) -> bool:
    """Rewrite the file at `path` without the known secret values' forms (see Redactor.file)."""
    return Redactor.known(values).file(path)


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
    given to `--secret-env`) replaced, then known secret values and URL passwords in any word (a word is one
    value: its URL password may hold spaces)."""
    marked, redactor = set(marked), Redactor.known(values)
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
        out.append(redact_url_passwords(redactor.text(word), whole=True))
        previous = word
    return out
