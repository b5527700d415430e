"""Text from outside (stored strings, bundles, other tools' logs) as data, never markup or control codes.

`plain(value)` is what a terminal may show: escape sequences (CSI `ESC [ ... m`, OSC `ESC ] 8 ;; link`,
any other `ESC x`) removed, other control characters (C0 but newline, DEL, C1) and the Unicode bidirectional
overrides that reorder what a reader sees removed, tabs as spaces. `for_rich(value)` is `plain(value)` as a
rich `Text`, which rich never reads as markup (`[/]`, `[link=...]`, a backslash before `[` print as
written; escaping the string instead cannot keep every backslash), for every table cell, title and line
that goes through rich.
`csv_cell(value)` keeps a spreadsheet from evaluating a text cell (`=`, `+`, `-`, `@`, tab or CR first: a
leading `'`, OWASP's advice for CSV injection); CSV exports hold `csv_cell(plain(value))`. `for_html(value)`
is `plain(value)` escaped for HTML text and attribute values: what every report page string goes through
(escaping alone keeps ESC and BEL, which a browser's view-source or a terminal `cat` of the page obeys).
`for_plot(value)` is `plain(value)` on one line, what a plot label may hold (the report also draws every
label with matplotlib's mathtext off, so `$...$` is text).

These are the only ways dlrun shows outside text: a terminal line, a rich cell, an HTML page, a plot label
and a CSV cell; `tests/test_untrusted_text.py` holds the modules that write those to them.
"""
from __future__ import annotations

import re
from typing import Any

# ESC [ params intermediates final | ESC ] ... (BEL | ESC \) | ESC P/X/^/_ ... ST | ESC and one character.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|.?)|\x9b[0-?]*[ -/]*[@-~]?",
                     re.DOTALL)
# C0 controls but newline and tab, DEL, C1 controls, and the bidi embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: Characters a spreadsheet reads as the start of a formula (or that hide one behind them).
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def plain(value: Any, *, newlines: bool = True) -> str:
    """`value` as text a terminal shows literally (see the module notes); newlines become spaces unless
    `newlines`."""
    text = _CONTROL.sub("", _ESCAPE.sub("", str(value)).replace("\t", " "))
    return text if newlines else text.replace("\n", " ")


def for_rich(value: Any, *, newlines: bool = True):
    """`plain(value)` as rich text that is never parsed as markup: what a rich table cell, title or console
    line may hold (a `rich.text.Text`; `str()` of it is `plain(value)`)."""
    from rich.text import Text

    return Text(plain(value, newlines=newlines))


def for_html(value: Any) -> str:
    """`plain(value)` escaped for HTML (quotes too: safe inside an attribute)."""
    from html import escape

    return escape(plain(value), quote=True)


def html_forms(value: str) -> tuple[str, str]:
    """How an HTML writer may print `value` exactly (quotes escaped, and not): what a leak search looks for."""
    from html import escape

    return escape(value), escape(value, quote=False)


def for_plot(value: Any) -> str:
    """`plain(value)` on one line: a plot's title, axis, legend or annotation text."""
    return plain(value, newlines=False)


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: strings that start a formula get a leading `'`; numbers and
    None pass as they are."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_START):
        return "'" + value
    return value


def number(value: Any, digits: int = 2, missing: str = "unknown") -> str:
    """A figure as tables show it (thousands separated), a string as it is, None as `missing`."""
    if value is None:
        return missing
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def percent(value: Any, digits: int = 1, missing: str = "unknown") -> str:
    """A fraction as a percentage, a string as it is, None as `missing`."""
    return missing if value is None else value if isinstance(value, str) else f"{value * 100:.{digits}f} %"
