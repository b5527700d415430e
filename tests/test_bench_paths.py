"""The benchmarks name the files they run by path (the harness, helper scripts): every such path in a benchmark
module exists, so that moving a file (as dlrun.workloads became dlrun.harness) cannot leave `make bench`
pointing at nothing while the tests pass. The modules are imported in a separate process: importing them has
effects (mpi4py initialises MPI, which leaves Open MPI variables that made a later test's mpirun exit 1)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import cli_json

BENCH = Path(__file__).resolve().parents[1] / "bench"

CHECK = '''
import importlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
checked, missing = 0, []
for name in sorted(p.stem for p in Path(sys.argv[1]).glob("*.py")):
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if isinstance(value, Path) and attr.isupper():
            checked += 1
            if not value.exists():
                missing.append(f"bench/{name}.py {attr} = {value}")
print(json.dumps({"checked": checked, "missing": missing}))
'''


def test_every_path_a_benchmark_module_names_exists():
    proc = subprocess.run([sys.executable, "-c", CHECK, str(BENCH)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["checked"] >= 5  # HARNESS, BENCH_DIR, REPO_ROOT, the storage reader, ...
    assert result["missing"] == []


READ_LATEST = '''
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from common import latest_result
run, result = latest_result(Path(sys.argv[2]))
print(json.dumps({"id": run["id"], "run_keys": sorted(run), "value": result["value"], "unit": result["unit"]}))
'''


def test_latest_result_gives_the_newest_runs_measured_value(dlrun_home):
    """Benchmarks 1, 5, 9 and 13 read back the run they just started through `latest_result`. The measured value
    is its result's: a stored run's record has none (benchmarks 1 and 9 once read `run["value"]` and failed
    `make bench` with a KeyError while every test passed). The run here is a real log imported into a real
    store, so the record is the one `dlrun run` leaves."""
    log = Path(__file__).parent / "data" / "logs" / "nccl-tests" / "superbench_allreduce_g8.log"
    imported = cli_json("results", "import-log", str(log), "--system", "s1")
    proc = subprocess.run([sys.executable, "-c", READ_LATEST, str(BENCH), str(dlrun_home)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["id"] == imported["added"][0]
    assert "value" not in got["run_keys"] and "results" in got["run_keys"]
    assert isinstance(got["value"], float) and got["value"] > 0 and got["unit"] == "GB/s"
