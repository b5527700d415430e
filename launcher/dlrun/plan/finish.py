"""What a site and the moment add to a plan beyond its options, as inputs of the last resolvers - never as edits
of a Plan afterwards (the Plan is immutable once `resolve_plan` returns it).

- `environ`: dlrun's own environment. An `--env` value that is the value of one of its secrets
  (`--env COPY=<$HF_TOKEN's value>`) is marked secret too: rendered by reference, redacted like the original.
- `matmul_ceiling(system, dtype)`: the site's newest measured matrix-multiply rate of the system in an element
  type (dlrun.measure.matmul_ceiling over the store). An LLM run's MFU is quoted against the rate in the type
  it really trains in (the contract's amp rule: bfloat16, also on GPUs), never another.
- `knob_decision(plan)`: this machine's tuning decision for the plan as resolved so far (dlrun.tune measures it
  where none is stored): `{"knobs": {knob: value}, "tuning": {...where it came from}}`, or None. Its values
  replace the knobs nobody asked for; their source becomes `tuned`.
- `variant(plan, **changes)`: a validated copy for a step of tuning (a trial rank), never a run's own plan.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlrun.harness.harness_contract import ran_dtype
from dlrun.plan.resolved import LocalImage, Plan
from dlrun.secrets import reused_secret_names

#: The Plan field of a knob whose name is not its field's.
KNOB_FIELDS = {"threads": "threads_per_rank"}


@dataclass(frozen=True)
class SiteInputs:
    """This site's inputs to a plan (see the module's notes); every one may be left out."""

    local_image: LocalImage | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    matmul_ceiling: Callable[[str, str], float | None] | None = None
    knob_decision: Callable[[Plan], Mapping[str, Any] | None] | None = None


def resolve_reused_secrets(res: Any) -> dict[str, Any]:
    """The plan's secret names, with every --env variable whose value is one of dlrun's own secrets."""
    env, secret = res.fields["env"], res.fields["secret_env"]
    reused = reused_secret_names(env, dict(res.site.environ)) - set(secret)
    return {"secret_env": sorted({*secret, *reused})}


def resolve_ceiling(res: Any) -> dict[str, Any]:
    """An LLM run's matmul ceiling: the system's newest measured rate in the element type it trains in."""
    lookup, work = res.site.matmul_ceiling, res.workload
    if lookup is None or work.kind != "llm-pretraining":
        return {}
    code = res.image.harness_framework or "pytorch"
    dtype = ran_dtype(res.fields["precision"], res.fields["device"], work.kind, code)
    rate = lookup(res.system.name, dtype)
    return {"matmul_gflops": float(rate)} if rate else {}


#: The finishing resolvers: each takes the Resolution of dlrun.plan.resolve after dlrun.runoptions.RESOLVERS'
#: resolvers (it reads what they decided) and returns the fields it decides.
FINISHING = (resolve_reused_secrets, resolve_ceiling)


def tuned_fields(plan: Plan, decision: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a tuning decision sets: its value for every knob nobody asked for (source `tuned`), and
    where the decision came from."""
    sources, fields = dict(plan.knob_sources), {}
    for name, value in (decision.get("knobs") or {}).items():
        if sources.get(name) != "default":
            continue  # asked for: the user's value stands
        fields[KNOB_FIELDS.get(name, name)] = value
        sources[name] = "tuned"
    return {**fields, "knob_sources": sources, "tuning": dict(decision.get("tuning") or {})}


def tuned(plan: Plan, fields: dict[str, Any], site: SiteInputs) -> Plan:
    """The plan with this machine's tuning decision applied, where the plan leaves knobs to it."""
    if site.knob_decision is None or not plan.knob_sources or plan.tune == "off":
        return plan
    decision = site.knob_decision(plan)
    if not decision:
        return plan
    return Plan(**{**fields, **tuned_fields(plan, decision)})


def variant(plan: Plan, **changes: Any) -> Plan:
    """A copy of `plan` with `changes`, validated as a Plan is (a trial rank of dlrun.tune)."""
    return Plan.model_validate({**dict(plan), **changes})
