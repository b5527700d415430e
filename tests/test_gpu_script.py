"""The GPU benchmark prepared up to the GPU: bench/gpu.sh's command lines (--dry-run) are valid dlrun command
lines here (every `dlrun run` renders with --dry-run), the script is shellcheck-clean, and the wheels it carries
to the GPU machine download for Python 3.12 and resolve there from themselves alone (no index)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from golden_files import shellcheck_path

REPO = Path(__file__).resolve().parents[1]


def _dry_run() -> dict:
    proc = subprocess.run(["bash", str(REPO / "bench" / "gpu.sh"), "--dry-run"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_gpu_script_lists_the_seven_measurements_within_its_budget(dlrun_home):
    plan = _dry_run()
    names = [step["name"] for step in plan["steps"]]
    for wanted in ("resnet50_dlrun", "resnet50_bare", "resnet18_dlrun", "resnet18_bare", "bert_fp16", "bert_bf16", "matmul_dlrun",
                   "matmul_bare", "nccl", "resnet50_jpeg", "resnet50_tfrecord", "doctor"):
        assert wanted in names
    assert plan["budget_s"] <= 8 * 60  # every step gets at most what is left of it (bench/gpu.py run_step)
    assert all(0 < step["timeout_s"] <= 120 for step in plan["steps"])
    assert subprocess.run([shellcheck_path(), "--severity=style", str(REPO / "bench" / "gpu.sh")]).returncode == 0


def test_every_dlrun_run_of_the_gpu_script_renders_here(dlrun_home):
    for step in _dry_run()["steps"]:
        argv = step["argv"]
        if argv[1:4] != ["-m", "dlrun.cli", "run"]:
            continue
        if "--data" in argv:  # the dataset the script writes first
            data = Path(argv[argv.index("--data") + 1])
            data.mkdir(parents=True, exist_ok=True)
        precision = argv[argv.index("--precision") + 1]
        if precision in ("fp16", "tf32"):  # GPU-only: refused on this CPU, rendered for a GPU system
            proc = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=300)
            assert proc.returncode == 2 and f"--precision {precision}: pytorch on CPUs" in proc.stderr, proc.stderr
            argv = [*argv, "--system", "dgx-h100", "--image", "pytorch2.6-ngc24.12"]
        proc = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (step["name"], proc.stderr)
        assert "harness_pytorch.py" in proc.stdout and f"--precision {precision}" in proc.stdout, step["name"]


def test_the_carried_wheels_resolve_for_python_312_without_an_index(tmp_path):
    wheels = tmp_path / "whl"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_wheels.py"), str(wheels)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert len(list(wheels.glob("*.whl"))) == 5 and list(wheels.glob("pydantic_core-*-cp312-*.whl"))
    resolve = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links",
                              str(wheels), "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
                              "--platform", "manylinux_2_17_x86_64", "--target", str(tmp_path / "site"), "pydantic"],
                             capture_output=True, text=True, timeout=300)
    assert resolve.returncode == 0, resolve.stdout + resolve.stderr
    assert "pydantic-core" in resolve.stdout.replace("_", "-")
