"""The gate's outcomes as JUnit XML, the report format every CI shows (GitLab, Jenkins, GitHub Actions),
written with junitparser: one test suite per system, one test case per outcome. A regression is a
`failure`, a configuration that cannot be judged an `error`, an inconclusive one `skipped` (with the
repeats that would decide), a pass a passed test case; the outcome's line is the case's output."""
from __future__ import annotations

from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.text import plain

from dlrun.gate import Outcome


def _junitparser():
    try:
        import junitparser
    except ImportError:
        raise DlrunError("--junit needs junitparser: pip install 'dlrun[check]' (or junitparser)",
                         exit_code=2) from None
    return junitparser


def _case(junit, outcome: Outcome):
    case = junit.TestCase(plain(f"{outcome.subject} against {outcome.against}", newlines=False),
                          plain(f"dlrun.check.{outcome.system}", newlines=False), 0.0)
    message = plain(outcome.why, newlines=False)
    if outcome.outcome == "regression":
        case.result = [junit.Failure(message, "regression")]
    elif outcome.outcome == "error":
        case.result = [junit.Error(message, "cannot judge")]
    elif outcome.outcome == "inconclusive":
        case.result = [junit.Skipped(message, "inconclusive")]
    lines = [outcome.line] + ([f"reference: {outcome.source}"] if outcome.source else [])
    lines += [f"runs: {' '.join(outcome.runs)}"] if outcome.runs else []
    case.system_out = plain("\n".join(lines))
    return case


def junit_xml(outcomes: list[Outcome]) -> str:
    """The XML document (a <testsuites> of one <testsuite> per system)."""
    junit = _junitparser()
    document = junit.JUnitXml("dlrun check")
    for system in sorted({o.system for o in outcomes}):
        suite = junit.TestSuite(plain(f"dlrun check: {system}", newlines=False))
        suite.add_testcases([_case(junit, o) for o in outcomes if o.system == system])
        suite.update_statistics()
        document.add_testsuite(suite)
    document.update_statistics()
    return '<?xml version="1.0" encoding="utf-8"?>\n' + document.tostring().decode("utf-8") + "\n"


def write_junit(path: Path, outcomes: list[Outcome]) -> None:
    from dlrun.files import write_atomic

    write_atomic(path, junit_xml(outcomes))
