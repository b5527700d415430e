"""How the command line talks: rich tables on the terminal, JSON on request, and errors as one line.

`handle_errors` is the one place a `DlrunError` becomes `dlrun: error: ...` and its exit code. Every string
shown here may have come from a store, a bundle or a log: table cells and titles go through
`dlrun.text.for_rich`, errors and warnings through `dlrun.text.plain`, so markup and escape sequences in them
print as written (or not at all), never as styles, links or terminal commands. JSON escapes them itself."""
from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import typer

from dlrun.errors import DlrunError
from dlrun.text import for_rich, plain


def console(stderr: bool = False):
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, emoji=False)
    # pipes and logs: do not squeeze tables into 80 columns (unless COLUMNS says how wide, as a terminal does)
    if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        out = Console(stderr=stderr, highlight=False, emoji=False, width=160)
    return out


def fail(message: str, code: int) -> None:
    print(f"dlrun: error: {plain(message)}", file=sys.stderr)
    raise typer.Exit(code)


def warn(message: str) -> None:
    print(f"dlrun: {plain(message)}", file=sys.stderr)


def handle_errors(func):
    """Run a command; a DlrunError is printed as one line and exits with its code, and so is a write its file
    system refused (full, read-only: `dlrun.files.file_system_error`) wherever it happened."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except DlrunError as exc:
            fail(str(exc), exc.exit_code)
        except OSError as exc:
            problem = _file_system_problem(exc)
            if problem is None:
                raise
            fail(str(problem), problem.exit_code)
    return wrapper


def _file_system_problem(exc: OSError):
    from pathlib import Path

    from dlrun.files import FULL_ERRNOS, READ_ONLY_ERRNOS, file_system_error
    from dlrun.paths import dlrun_home

    if exc.errno not in (*FULL_ERRNOS, *READ_ONLY_ERRNOS):
        return None
    return file_system_error(Path(exc.filename) if exc.filename else dlrun_home(), exc)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    out = Table(title=for_rich(title, newlines=False))
    for index, column in enumerate(columns):
        out.add_column(for_rich(column), no_wrap=index == 0)
    for row in rows:
        out.add_row(*("" if cell is None else for_rich(cell) for cell in row))
    console().print(out)


def fields_table(title: str, rows: list[list[Any]]) -> None:
    table(title, ["field", "value"], rows)
