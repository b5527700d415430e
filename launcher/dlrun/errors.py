"""User-facing errors: one line, naming the bad value and what would be valid."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class DlrunError(Exception):
    """An error the CLI prints as one line and exits with `exit_code`."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(DlrunError):
    """Bad input from the user (names, counts, options): exit code 2."""

    exit_code = 2


def closest(value: str, choices: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.5)
    return matches[0] if matches else None


def unknown_name(kind: str, value: str, choices: Iterable[str]) -> UsageError:
    """`unknown image 'tf1.41-nccl'; did you mean 'tf1.14-nccl'? valid: a, b, c`."""
    choices = sorted(choices)
    hint = closest(value, choices)
    did_you_mean = f"; did you mean {hint!r}?" if hint else ";"
    return UsageError(f"unknown {kind} {value!r}{did_you_mean} valid: {', '.join(choices)}")


#: Quotation marks a quote may arrive wrapped in (opening -> closing).
_QUOTE_PAIRS = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019", "\u00ab": "\u00bb", "\u201e": "\u201c"}


def unquoted(text: str) -> str:
    """`text` without one pair of quotation marks around it: a quote is stored as the words, and whoever shows
    it adds the marks (else `--source 'DOC; WHERE; "WORDS"'` would print as ""WORDS"")."""
    stripped = text.strip()
    if len(stripped) >= 2 and _QUOTE_PAIRS.get(stripped[0]) == stripped[-1]:
        return stripped[1:-1].strip()
    return text
