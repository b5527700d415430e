"""The steps between a resolved plan and its execution, one sequence for `dlrun run` and `dlrun reproduce`:
the pre-launch checks on this node (the caller judges the findings: it refuses, or says them and goes on
under --skip-checks), then the image's digest against the site's lock. What they found goes to the execution
with the plan (`Cleared`) and is stored with the run; nothing is kept in module state."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlrun.images.verify import verify_plan_image
from dlrun.plan import Plan
from dlrun.preflight import Finding, preflight

#: Sees a plan's findings before anything runs: raises to refuse, says what it lets pass.
Judge = Callable[[list[Finding]], None]
#: The image checks of one pre-run, by (image, architecture, runtime): a copy several plans use is read once.
Verified = dict[tuple[str, str, str], dict[str, Any]]


@dataclass(frozen=True)
class Cleared:
    """What the pre-run steps found for one plan; the run keeps it (inventory.json, preflight.json, and the
    image check in its provenance)."""

    inventory: dict[str, Any]
    findings: list[Finding]
    #: What the image's digest check found (`{"image_check": {...}}`); empty for the host's own Python.
    image_check: dict[str, Any] = field(default_factory=dict)


def clear(plan: Plan, inventory: dict[str, Any], judge: Judge, verified: Verified | None = None, *,
          skip_checks: bool = False) -> Cleared:
    """Check `plan` on this node, let `judge` refuse it, then check its image against the site's lock (which
    refuses, exit 1, a copy whose digest differs; with `skip_checks` an image this host has no digest of runs,
    recorded as not verified)."""
    findings = preflight(plan, inventory)
    judge(findings)
    key = (plan.image.name, plan.image_arch, plan.runtime)
    if verified is not None and key in verified:
        image_check = verified[key]
    else:
        image_check = verify_plan_image(plan, skip_checks)
        if verified is not None:
            verified[key] = image_check
    return Cleared(inventory=inventory, findings=findings, image_check=image_check)
