"""What dlrun can do, derived from its code, and where the catalog's experiments say otherwise.

An experiment's `status.requires` and a deviation's `lacks` name capabilities (the vocabulary is
`dlrun.catalog.experiment_vocabulary.CAPABILITIES` and `CAPABILITY_FAMILIES`). Whether dlrun has one is read
here from the code that would provide it, never written down by hand:

    real-data          the PyTorch harness takes --data-dir (and reads a dataset format)
    system-storage     the system profile schema has a field naming file systems
    parallelism-axis   `--dist` is declared with the experiment axis `parallelism`
    workload:NAME      the catalog has the workload
    collective:NAME    the harness's table of collectives (--benchmark) has it
    dist:NAME          `dlrun run --dist` takes it and the PyTorch harness runs it
    data-format:NAME   a dataset reader of the PyTorch harness reads it (its `format`)
    metric:NAME        some code of dlrun stores result rows of that metric
    precision:NAME     `dlrun run --precision` takes it and the PyTorch harness computes in it

The harness files are read as source (`ast`), not imported: they import PyTorch. `disagreements()` lists
every status and deviation the code contradicts; the tests require none for the built-in catalog.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from pathlib import Path

from dlrun.catalog.experiment_vocabulary import CAPABILITIES, CAPABILITY_FAMILIES, METRICS
from dlrun.catalog.loader import Catalog
from dlrun.catalog.models import SystemSpec, WorkloadSpec
from dlrun.paths import HARNESS_DIR, PACKAGE_DIR

#: Fields a system profile would name its file systems in.
STORAGE_FIELDS = ("storage", "filesystems", "file_systems")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value a module assigns to `name` at its top level."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _strings(node: ast.expr | None) -> set[str]:
    """The string constants of a tuple/list/set literal, or the string keys of a dict literal."""
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


@functools.lru_cache(maxsize=1)
def _harness_options() -> frozenset[str]:
    """The options the PyTorch harness's entry declares (`add_argument("--name", ...)`)."""
    options = set()
    for node in ast.walk(_tree(HARNESS_DIR / "harness_pytorch.py")):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant)):
            options.add(str(node.args[0].value))
    return frozenset(options)


@functools.lru_cache(maxsize=1)
def _data_formats() -> frozenset[str]:
    """`format = "..."` of the dataset readers (classes) of the PyTorch harness."""
    found = set()
    for node in ast.walk(_tree(HARNESS_DIR / "harness_pytorch_dataset.py")):
        if isinstance(node, ast.ClassDef):
            found |= {value.value for stmt in node.body if isinstance(stmt, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "format" for t in stmt.targets)
                      for value in [stmt.value] if isinstance(value, ast.Constant)}
    return frozenset(found)


@functools.lru_cache(maxsize=1)
def _stored_metrics() -> frozenset[str]:
    """Metrics some code of dlrun writes into a result row (`"metric": "NAME"` or `metric="NAME"`), and the
    model facts' (their metric is the name of the count)."""
    facts = _assigned(_tree(PACKAGE_DIR / "reproduce" / "model_facts.py"), "FACT_UNITS")
    found = {key.value for key in facts.keys if isinstance(key, ast.Constant)} if isinstance(facts, ast.Dict) else set()
    for path in PACKAGE_DIR.rglob("*.py"):
        if PACKAGE_DIR / "catalog" in path.parents:  # the vocabulary names metrics; it stores none
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Dict):
                found |= {v.value for k, v in zip(node.keys, node.values)
                          if isinstance(k, ast.Constant) and k.value == "metric" and isinstance(v, ast.Constant)
                          and isinstance(v.value, str)}
            elif (isinstance(node, ast.keyword) and node.arg == "metric" and isinstance(node.value, ast.Constant)
                  and isinstance(node.value.value, str)):
                found.add(node.value.value)
    return frozenset(found)


def _family(family: str, workloads: Mapping[str, WorkloadSpec]) -> set[str]:
    if family == "workload":
        return set(workloads)
    if family == "collective":
        return _strings(_assigned(_tree(HARNESS_DIR / "harness_pytorch_collectives.py"), "COLLECTIVES"))
    if family == "dist":  # what `dlrun run --dist` takes and the harness runs
        from dlrun.runoptions import BY_NAME

        harness = _strings(_assigned(_tree(HARNESS_DIR / "harness_pytorch_horovod.py"), "DIST_CHOICES"))
        return harness & set(BY_NAME["dist"].choices)
    if family == "data-format":
        return set(_data_formats())
    if family == "metric":
        return set(_stored_metrics())
    if family == "precision":
        from dlrun.runoptions import PRECISIONS  # the contract's, which the harness's --precision takes

        return _strings(_assigned(_tree(HARNESS_DIR / "harness_contract.py"), "PRECISIONS")) & set(PRECISIONS)
    raise KeyError(family)


def has(name: str, catalog: Catalog) -> bool:
    """Whether dlrun has capability `name` (an unknown name is a KeyError)."""
    return has_with(name, catalog.workloads)


def has_with(name: str, workloads: Mapping[str, WorkloadSpec]) -> bool:
    """`has`, given the catalog's workloads only (what `experiment_points.effective_status` holds)."""
    family, sep, member = name.partition(":")
    if sep:
        if family not in CAPABILITY_FAMILIES:
            raise KeyError(name)
        return member in _family(family, workloads)
    if name == "real-data":
        return "--data-dir" in _harness_options() and bool(_data_formats())
    if name == "system-storage":
        return any(field in SystemSpec.model_fields for field in STORAGE_FIELDS)
    if name == "parallelism-axis":  # an experiment point sets --dist only through a declared axis
        from dlrun.runoptions import BY_NAME

        return BY_NAME["dist"].axis == "parallelism"
    raise KeyError(name)


def describe(name: str) -> str:
    """What capability `name` is, in words."""
    family, sep, member = name.partition(":")
    if family == "metric" and member in METRICS:
        return f"results of {member} ({METRICS[member]})"
    return CAPABILITY_FAMILIES[family].replace("NAME", member) if sep else CAPABILITIES[name]


def requirements_text(names: list[str], catalog: Catalog) -> str:
    """`name (has it)` / `name (lacks it: what it is)` for each name, as `dlrun experiments show` prints them."""
    return "; ".join(f"{name} (dlrun has it)" if has(name, catalog) else f"{name} (dlrun lacks it: {describe(name)})"
                     for name in names)


def disagreements(catalog: Catalog) -> list[str]:
    """Each experiment status or deviation the code contradicts, as one line naming it and what to change."""
    found = []
    for experiment in sorted(catalog.experiments.values(), key=lambda e: e.id):
        status = experiment.status
        lacking = [name for name in status.requires if not has(name, catalog)]
        where = f"{experiment.id}: status {status.kind}"
        if status.kind == "needs-feature" and not status.requires:
            found.append(f"{where} names no capability it needs (status.requires)")
        elif status.kind == "runnable" and lacking:
            found.append(f"{where}, but dlrun lacks {', '.join(lacking)}")
        if status.kind == "needs-workload" and all(name in catalog.workloads for name in status.workloads):
            found.append(f"{where} {', '.join(status.workloads)}, but they exist: make it runnable")
        for deviation in experiment.deviations:
            have = [name for name in deviation.lacks if has(name, catalog)]
            if have:
                found.append(f"{experiment.id}: deviation {deviation.setting!r} stands on dlrun lacking "
                             f"{', '.join(have)}, which it has now: rewrite it")
    return found
