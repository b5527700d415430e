"""What the efficiency columns need from outside the store: system profiles from the catalogs, and the
forward multiply-adds of each model, counted on the harness's own model definitions (and cached beside them:
dlrun.harness.counted_models). Without PyTorch the catalog's published count (Ren et al., Table II)
stands in, named as such.
"""
from __future__ import annotations

import re
from typing import Any

from dlrun.results.key import NOT_APPLICABLE, UNKNOWN


def efficiency_inputs(keys: list[dict[str, Any]]):
    """EfficiencyInputs for the systems and models of the selected runs."""
    from dlrun.results.compare.efficiency import EfficiencyInputs, ModelFlops, system_facts
    from dlrun.harness import counted_models

    systems = {k.get("system") for k in keys} - {UNKNOWN, None}
    models = {k.get("model") for k in keys if k.get("batch_per_device") != NOT_APPLICABLE} - {UNKNOWN, None}
    catalog = _catalog(with_host="localhost" in systems)
    facts = {name: system_facts(catalog.systems[name]) for name in systems if name in catalog.systems}
    flops: dict[str, ModelFlops] = {}
    for name, counted in counted_models(models).items():
        flops[name] = ModelFlops(float(counted["forward_macs"]), "counted on dlrun's harness model")
    flops.update(_llm_flops(models - set(flops)))
    for workload in catalog.workloads.values():  # published counts where counting was not possible
        published = workload.published_ops_per_image
        if workload.model in models and workload.model not in flops and published is not None:
            flops[workload.model] = ModelFlops(published.value, f"{published.source.doc}, {published.source.where}")
    return EfficiencyInputs(systems=facts, models=flops)


def _catalog(with_host: bool):
    from dlrun.catalog import load_catalog

    if with_host:
        from dlrun.probe.host import probe_host

        return load_catalog(host=probe_host())
    return load_catalog()


#: An LLM's key model: its name, sequence length and activation checkpointing (dlrun.results.key).
_LLM_MODEL = re.compile(r"(?P<name>llama3_\w+) seq=(?P<seq>\d{1,7})(?: activation-checkpointing)?")


def _llm_flops(models: set[str]) -> dict[str, Any]:
    """FLOPs per token of the LLM models among `models` at their sequence length, as forward multiply-adds per
    token (FLOPs / 6), so that training FLOP per token = 6 N + 12 L H Q T (PaLM, Appendix B)."""
    from dlrun.errors import DlrunError
    from dlrun.results.compare.efficiency import ModelFlops
    from dlrun.harness import describe_llm

    out = {}
    for name in models:
        match = _LLM_MODEL.fullmatch(name)
        if match is None:
            continue
        try:
            facts = describe_llm(match["name"], int(match["seq"]))
        except DlrunError:
            continue
        out[name] = ModelFlops(facts["flops_per_token"] / 6, f"counted on dlrun's harness model: "
                               f"{facts['flops_per_token']:,} FLOPs per token = 6 N + 12 L H Q T at T = {match['seq']}")
    return out
