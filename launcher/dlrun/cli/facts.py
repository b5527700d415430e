"""What the efficiency columns need from outside the store: system profiles from the catalogs, and the
forward multiply-adds of each model, counted on the harness's own model definitions.

Counting needs PyTorch (a second or two to import), so the counts are kept in
`$XDG_CACHE_HOME/dlrun/model-facts.json`, keyed by the harness file's sha256: a changed harness is
counted again. Without PyTorch the catalog's published count (Ren et al., Table II) stands in, named as
such.
"""
from __future__ import annotations

import json
import os
from typing import Any

from dlrun.results.key import NOT_APPLICABLE, UNKNOWN

CACHE_NAME = "model-facts.json"


def _harness_sha256() -> str:
    from dlrun.images.digest import file_sha256
    from dlrun.paths import HARNESS_DIR

    return file_sha256(HARNESS_DIR / "harness_pytorch.py")


def _read_cache(path, harness: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("models", {}) if isinstance(data, dict) and data.get("harness_sha256") == harness else {}


def _write_cache(path, harness: str, models: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"harness_sha256": harness, "models": models}, indent=1, sort_keys=True))
    os.replace(tmp, path)  # readers see the old file or the new one, never half of one


def counted_models(names: set[str]) -> dict[str, dict[str, Any]]:
    """model -> {"forward_macs", "params"} for the models the harness knows, from the cache or counted
    (a name the harness does not know is cached as None)."""
    from dlrun.errors import DlrunError, UsageError
    from dlrun.paths import cache_home

    path = cache_home() / CACHE_NAME
    harness = _harness_sha256()
    cache = _read_cache(path, harness)
    missing = sorted(n for n in names if n not in cache)
    if missing:
        from dlrun.workloads import describe_model

        for name in missing:
            try:
                facts = describe_model(name)
            except UsageError:  # not a model of the harness: remembered, so PyTorch is not imported again
                cache[name] = None
                continue
            except DlrunError:  # no PyTorch here: nothing to remember
                continue
            cache[name] = {"forward_macs": facts["forward_macs"], "params": facts["params"]}
        try:
            _write_cache(path, harness, cache)
        except OSError:
            pass  # a read-only cache only costs the count next time
    return {n: cache[n] for n in names if cache.get(n)}


def efficiency_inputs(keys: list[dict[str, Any]]):
    """EfficiencyInputs for the systems and models of the selected runs."""
    from dlrun.results.compare.efficiency import EfficiencyInputs, ModelFlops, system_facts

    systems = {k.get("system") for k in keys} - {UNKNOWN, None}
    models = {k.get("model") for k in keys if k.get("batch_per_device") != NOT_APPLICABLE} - {UNKNOWN, None}
    catalog = _catalog(with_host="localhost" in systems)
    facts = {name: system_facts(catalog.systems[name]) for name in systems if name in catalog.systems}
    flops: dict[str, ModelFlops] = {}
    for name, counted in counted_models(models).items():
        flops[name] = ModelFlops(float(counted["forward_macs"]), "counted on dlrun's harness model")
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
