"""Findings: what a check found, at which level, and how to fix it."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlrun.errors import DlrunError


class PreflightError(DlrunError):
    """The run would fail or measure the wrong thing; refused before anything starts."""

    exit_code = 2


@dataclass(frozen=True)
class Finding:
    level: str  # ok | warn | error
    check: str
    message: str
    fix: str | None = None

    def line(self) -> str:
        return self.message + (f"; fix: {self.fix}" if self.fix else "")


def refuse_on_errors(findings: list[Finding]) -> None:
    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise PreflightError("refusing to run: " + " | ".join(f.line() for f in errors)
                             + " (--skip-checks runs anyway, e.g. from a submit host that is not a compute node)")


def findings_json(findings: list[Finding]) -> list[dict[str, Any]]:
    return [asdict(f) for f in findings]
