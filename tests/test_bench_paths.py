"""The benchmarks name the files they run by path (the harness, helper scripts): every such path in a benchmark
module exists, so that moving a file (as dlrun.workloads became dlrun.harness) cannot leave `make bench`
pointing at nothing while the tests pass."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_every_path_a_benchmark_module_names_exists(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    names = sorted(p.stem for p in BENCH.glob("*.py"))
    checked, missing = 0, []
    for name in names:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if isinstance(value, Path) and attr.isupper():
                checked += 1
                if not value.exists():
                    missing.append(f"bench/{name}.py {attr} = {value}")
    for name in names:
        sys.modules.pop(name, None)
    assert checked >= 5  # HARNESS, BENCH_DIR, REPO_ROOT, the storage reader, ...
    assert missing == []
