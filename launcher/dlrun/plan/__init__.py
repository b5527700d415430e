"""Resolve names and overrides into one immutable Plan: everything a run needs, as data.

`resolved` holds the Plan itself; `resolve` the pipeline of resolvers that builds it from the run options
declared in dlrun.runoptions; `finish` what the site adds (secrets, matmul ceiling, tuning decision) as inputs of
its last resolvers; `inputs` and `backends` the checks of what the user typed."""
from dlrun.plan.finish import SiteInputs, variant
from dlrun.plan.resolve import resolve_plan
from dlrun.plan.resolved import (DATA_MOUNT, DERIVED_FIELDS, Bind, DataSpec, LocalImage, Plan, fabric_for,
                                  gpudirect_for)

__all__ = ["DATA_MOUNT", "DERIVED_FIELDS", "Bind", "DataSpec", "LocalImage", "Plan", "SiteInputs", "fabric_for",
           "gpudirect_for", "resolve_plan", "variant"]
