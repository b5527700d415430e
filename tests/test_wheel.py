"""dlrun installed like any Python tool: the wheel carries the built-in catalogs, resolves every built-in file
from the installed package, and behaves as the editable install does, from a directory outside the checkout.
(No torch in that virtualenv: listing and rendering need none.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                   check=True, capture_output=True, text=True, timeout=600)
    wheel = next(dist.glob("dlrun-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, capture_output=True, text=True, timeout=600)
    outside = root / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "cwd": outside, "home": root / "home"}


def _dlrun(executable: Path, cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLRUN_HOME": str(home / "dlrun"), "XDG_CONFIG_HOME": str(home / "config"),
           "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("DLRUN_PATH", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(executable), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _both(installed, *args: str) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    wheel = _dlrun(installed["venv"] / "bin" / "dlrun", installed["cwd"], installed["home"], *args)
    editable = _dlrun(Path(sys.executable).parent / "dlrun", REPO, installed["home"], *args)
    assert wheel.returncode == 0, wheel.stderr
    assert editable.returncode == 0, editable.stderr
    return wheel, editable


def test_the_wheel_carries_the_catalogs_and_the_harness(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    assert "dlrun/_builtin/recipes/workloads/cnn.yaml" in names
    assert "dlrun/_builtin/containers/cpu-reference/image.yaml" in names
    assert "dlrun/harness/harness_pytorch.py" in names
    assert not any(name.startswith(("tests/", "bench/")) for name in names)


@pytest.mark.parametrize("kind", ["workloads", "systems", "images"])
def test_installed_lists_what_the_checkout_lists(installed, kind):
    wheel, editable = _both(installed, kind, "list", "--json")
    listed, expected = json.loads(wheel.stdout), json.loads(editable.stdout)
    if kind == "images":  # the host images are this install's own Python and harness: the entries that differ
        hosts = [entry for entry in listed if entry["kind"] == "host"]
        assert {entry["name"] for entry in hosts} == {"host", "host-tf"}
        for host in hosts:
            assert host["harness_dir"].startswith(str(installed["venv"])) and host["python"].startswith(
                str(installed["venv"]))
        listed = [entry for entry in listed if entry["kind"] != "host"]
        expected = [entry for entry in expected if entry["kind"] != "host"]
    assert listed == expected
    assert len(listed) >= 5


def test_installed_renders_a_dgx2_job_byte_identical_to_the_checkout(installed):
    wheel, editable = _both(installed, "run", "resnet50", "--system", "dgx2", "--dry-run")
    assert wheel.stdout == editable.stdout
    assert "#SBATCH" in wheel.stdout or "docker" in wheel.stdout


def test_installed_reads_its_builtins_from_the_package_and_writes_nothing_there(installed):
    python = installed["venv"] / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    out = subprocess.run([str(python), "-c", "import dlrun.paths as p; print(p.builtin_root()); print(p.HARNESS_DIR)"],
                         cwd=installed["cwd"], capture_output=True, text=True, check=True, env=env).stdout.split()
    site = str(installed["venv"])
    assert out[0].startswith(site) and out[0].endswith("dlrun/_builtin")
    assert out[1].startswith(site)
    before = sorted(str(p) for p in (Path(out[0]).parent).rglob("*") if "__pycache__" not in p.parts)
    _dlrun(installed["venv"] / "bin" / "dlrun", installed["cwd"], installed["home"], "plan", "resnet50",
           "--system", "dgx2")
    after = sorted(str(p) for p in (Path(out[0]).parent).rglob("*") if "__pycache__" not in p.parts)
    assert after == before
