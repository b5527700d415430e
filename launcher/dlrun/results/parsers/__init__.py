"""Parsers: benchmark output text -> checked results.

`parse_text(text)` finds the format itself, trying dlrun's harness first (its output also holds
tf_cnn_benchmarks-style and nccl-tests-style summary lines, but its `DLRUN_RESULT` line is the result);
`parse_text(text, fmt="nccl-tests")` names it. `parse_all` returns every result of a log that holds several
(nccl-tests run one test after another). Parsers raise ParseError and nothing else.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from dlrun.errors import unknown_name
from dlrun.results.parsers import (dllogger, dlrun_harness, fio, horovod, megatron, mllog, nccl_tests, nccl_tests_json,
                                   nemo, osu, tf_cnn_benchmarks, torchtitan)
from dlrun.results.parsers.common import Log, LogFile
from dlrun.results.parsers.result import UNITS, ParsedResult, ParseError, SizeRow

__all__ = ["FORMATS", "UNITS", "ParseError", "ParsedResult", "SizeRow", "list_formats", "parse_all",
           "parse_text"]

_MODULES: tuple[ModuleType, ...] = (dlrun_harness, nccl_tests_json, nccl_tests, tf_cnn_benchmarks, horovod, dllogger,
                                    mllog, torchtitan, megatron, nemo, osu, fio)
#: Format name -> parser, in the order auto-detection tries them.
FORMATS: dict[str, Callable[[str], list[ParsedResult]]] = {module.NAME: module.parse for module in _MODULES}


def list_formats() -> list[tuple[str, str]]:
    """(name, what it reads) for every format, in detection order."""
    return [(module.NAME, module.DESCRIPTION) for module in _MODULES]


def parse_all(text: Log, fmt: str | None = None) -> list[ParsedResult]:
    """Every result in `text` (a log's text, or a LogFile read a line at a time): from the named format, or
    from the first format that finds one."""
    if not isinstance(text, (str, LogFile)):
        raise ParseError(f"expected log text, got {type(text).__name__}")
    if fmt is not None:
        if fmt not in FORMATS:
            raise ParseError(str(unknown_name("log format", fmt, FORMATS)), exit_code=2)
        results = FORMATS[fmt](text)
        if not results:
            raise ParseError(f"no {fmt} result found")
        return results
    for parser in FORMATS.values():
        results = parser(text)
        if results:
            return results
    raise ParseError("no result found: expected one of " + "; ".join(desc for _, desc in list_formats()))


def parse_text(text: Log, fmt: str | None = None) -> ParsedResult:
    """The one result in `text`; a log with several (nccl-tests runs in a row) needs `parse_all`."""
    results = parse_all(text, fmt)
    if len(results) > 1:
        names = ", ".join(str(result.collective or result.kind) for result in results)
        raise ParseError(f"the log holds {len(results)} results ({names}); import them one by one "
                         "(parse_all) or split the log")
    return results[0]
