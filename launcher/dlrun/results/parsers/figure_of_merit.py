"""A site's own command's result (`kind: command`, dlrun.catalog.commands): one of dlrun's parsers by name,
or a declared figure of merit read by the site's regular expression.

The regular expression is the site's; the text it reads is the command's output, searched line by line
(launcher tags removed) with lines cut at MAX_LINE characters and at most MAX_LINES lines, so that neither a
long line nor a long log makes the search slow. The last matching line is the value: a program that prints
progress prints its final figure last.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from dlrun.results.parsers import parse_all
from dlrun.results.parsers.common import read_float, tagged_lines
from dlrun.results.parsers.result import ParsedResult, ParseError

KIND = "command"
MAX_LINE = 4096
MAX_LINES = 200_000
#: The direction each metric is better in (as dlrun.catalog.commands.BETTER declares it).
LOWER_IS_BETTER = frozenset({"latency"})


def parse_figure(text: str, pattern: str, *, metric: str, unit: str, description: str | None = None) -> ParsedResult:
    """The last line of `text` that `pattern` (one group) matches, as a `metric` in `unit`."""
    regex = re.compile(pattern)
    found: tuple[int, str] | None = None
    for number, (_, line) in enumerate(tagged_lines(text)):
        if number >= MAX_LINES:
            break
        match = regex.search(line[:MAX_LINE])
        if match:
            found = (number + 1, match.group(1) or "")
    if found is None:
        raise ParseError(f"no line matches the figure of merit's regex {pattern!r}")
    line, figure = found
    value = read_float(figure, f"figure of merit on line {line}")
    what = description or f"{metric} in {unit}"
    return ParsedResult(kind=KIND, metric=metric, value=value, unit=unit,
                        extra={"figure_of_merit": {"regex": pattern, "line": line, "text": figure},
                               "direction": direction(metric)},
                        value_is=f"{what}: the figure of merit on output line {line} (the last line the regex "
                                 "matches)")


def direction(metric: str) -> str:
    """Which way `metric` is better: lower for a latency, higher for every rate."""
    return "lower" if metric in LOWER_IS_BETTER else "higher"


def parse_command_output(result: Any, texts: list[str]) -> tuple[ParsedResult | None, str | None]:
    """(result, error) of a command's output `texts` (the first that holds one) under its `result` contract
    (a dlrun.catalog.commands.CommandResult)."""
    error = None
    for text in texts:
        try:
            if result.format == "regex":
                return parse_figure(text, result.regex, metric=result.metric, unit=result.unit,
                                    description=result.description), None
            found = parse_all(text, result.parser)
        except ParseError as exc:
            error = str(exc)
            continue
        if len(found) > 1:
            return None, (f"the command printed {len(found)} {result.format} results; its contract names one "
                          "(run one test per workload)")
        return _own_words(found[0], result), None
    return None, error or "the command printed nothing"


def _own_words(found: ParsedResult, result: Any) -> ParsedResult:
    """A command's DLRUN_RESULT line explained in its own words: its `value_is`, else the contract's
    `description`, else its `formula`; never the harness's formula, which dlrun cannot know the command used."""
    extra = found.extra if isinstance(found.extra, dict) else {}
    if result.format != "dlrun-result" or isinstance(extra.get("value_is"), str):
        return found
    formula = extra.get("formula") if isinstance(extra.get("formula"), str) else None
    said = result.description or f"the command's own {found.metric} in {found.unit}"
    how = (f"computed by it as {formula[:200]}" if formula else
           "how it was computed is the command's (its DLRUN_RESULT line gives no value_is or formula)")
    return replace(found, value_is=f"{said}: {how}")
