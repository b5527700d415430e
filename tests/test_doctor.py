"""Pre-launch checks: the node inventory, MPI flavour parsing, host vs container MPI compatibility for the
hybrid model (refused with the reason and the fix), and `dlrun doctor` itself."""
from __future__ import annotations

import json

import pytest
from conftest import run_cli

from dlrun.launchers.base import PmiRequest
from dlrun.preflight import node_inventory
from dlrun.preflight.mpi_pairs import check_mpi_compat
from dlrun.probe.mpi import MpiInfo, parse_mpi_version
from dlrun.registry import LAUNCHERS, RUNTIMES

VERSION_OUTPUTS = [
    ("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/", "openmpi", "4.1.4"),
    ("mpirun (IBM Spectrum MPI) 10.3.1.2\n", "spectrum", "10.3.1.2"),
    ("Intel(R) MPI Library for Linux* OS, Version 2019 Update 4 Build 20190430 (id: cbdd16069)", "intel",
     "2019 Update 4"),
    ("HYDRA build details:\n    Version:                                 3.3.2\n    Release Date: ...", "mpich",
     "3.3.2"),
    ("MVAPICH2 Version      :\t2.3.7\nMVAPICH2 Release date :\tWed March 02 22:00:00 EST 2022", "mvapich2", "2.3.7"),
    ("openmpi 4.0.1", "openmpi", "4.0.1"),
]


@pytest.mark.parametrize("text,flavour,version", VERSION_OUTPUTS)
def test_parse_mpi_version(text, flavour, version):
    info = parse_mpi_version(text)
    assert (info.flavour, info.version) == (flavour, version)


def _compat(host, image, launcher="mpirun", runtime="singularity", **kw):
    return check_mpi_compat(parse_mpi_version(host) if host else None,
                            parse_mpi_version(image) if isinstance(image, str) else image,
                            launcher=LAUNCHERS.get(launcher), runtime=RUNTIMES.get(runtime), **kw)


def test_compatible_pair_is_ok():
    [finding] = _compat("openmpi 4.0.5", "openmpi 4.0.1")
    assert finding.level == "ok" and "match in major.minor" in finding.message


def test_different_release_series_is_refused_with_the_fix():
    [finding] = _compat("mpirun (Open MPI) 4.1.4", "openmpi 4.0.1")
    assert finding.level == "error"
    assert "4.1 vs 4.0" in finding.message and "must match in major.minor" in finding.message
    assert "module load openmpi/4.0" in finding.fix and "--launcher srun" in finding.fix


def test_different_mpi_families_are_refused():
    [finding] = _compat("HYDRA build details:\n Version: 3.3.2", "openmpi 4.0.1")
    assert finding.level == "error" and "rank 0 of 1" in finding.message
    # Spectrum MPI and HPC-X are Open MPI underneath: same family, so only the version rule applies.
    assert _compat("mpirun (IBM Spectrum MPI) 10.3.1.2", "openmpi 4.0.1")[0].level == "error"


def test_no_host_mpi_for_mpirun_is_refused():
    [finding] = _compat(None, "openmpi 4.0.1")
    assert finding.level == "error" and "needs an MPI on the host" in finding.message


def test_srun_pmi_must_be_supported_by_the_image():
    from matrix_catalog import matrix_plan

    from dlrun.registry import SCHEDULERS

    pmi = LAUNCHERS.get("srun").pmi_request(matrix_plan("singularity", "srun", "tcp"), SCHEDULERS.get("slurm"))
    assert pmi == PmiRequest("pmix", "srun --mpi=pmix", "scheduler_options.srun_mpi")
    image = MpiInfo(flavour="openmpi", version="4.0.1", pmi=("pmi2",))
    [finding] = _compat(None, image, launcher="srun", pmi=pmi)
    assert finding.level == "error" and finding.message.startswith("srun --mpi=pmix but the image's openmpi 4.0.1")
    assert finding.fix == ("set scheduler_options.srun_mpi to pmi2 in the system profile, or use an image built "
                           "with PMIx")
    ok = MpiInfo(flavour="openmpi", version="4.0.1", pmi=("pmix",))
    assert _compat(None, ok, launcher="srun", pmi=PmiRequest("pmix_v3", "srun --mpi=pmix_v3", "x"))[0].level == "ok"


def test_host_runtime_and_mpi_free_images_need_no_match():
    assert _compat("openmpi 4.1.4", "openmpi 3.1.2", runtime="host") == []
    docker, mpirun = RUNTIMES.get("docker"), LAUNCHERS.get("mpirun")
    assert check_mpi_compat(None, "not_used", launcher=mpirun, runtime=docker)[0].level == "ok"


def test_inventory_is_json_and_complete():
    inventory = node_inventory()
    json.dumps(inventory)
    assert {"hostname", "os", "kernel", "arch", "cpu", "memory_gb", "gpu", "fabrics", "container_runtimes", "mpi",
            "schedulers", "python", "torch"} <= set(inventory)
    assert inventory["cpu"]["logical_cpus"] >= 1 and inventory["cpu"]["numa"]
    assert "tcp" in inventory["fabrics"]["usable"]
    assert inventory["mpi"]["flavour"] == "openmpi"  # OpenMPI is a test dependency (make sysdeps)
    assert set(inventory["container_runtimes"]) == {"singularity", "apptainer", "docker", "podman", "charliecloud",
                                                    "enroot"}
    assert inventory["collect_seconds"] < 10


def test_doctor_cli_json(dlrun_home):
    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["plan"]["system"] == "localhost" and report["inventory"]["hostname"]
    assert all(check["level"] != "error" for check in report["checks"])


def test_doctor_refuses_the_seed_stack_against_this_hosts_mpi(dlrun_home):
    """TX-GAIA's image pins Open MPI 4.0.1; this host has Debian's 4.1.x: the hybrid launch is refused."""
    proc = run_cli("doctor", "--system", "txgaia", "--image", "tf1.14-nccl", "--json")
    assert proc.returncode == 1
    checks = json.loads(proc.stdout)["checks"]
    compat = [c for c in checks if c["check"] == "mpi-compat"]
    assert compat and compat[0]["level"] == "error" and "4.0.1" in compat[0]["message"]
    assert any(c["check"] == "fabric" and c["level"] == "warn" for c in checks)  # no Omni-Path here
    table = run_cli("doctor", "--system", "txgaia")
    assert table.returncode == 1 and "mpi-compat" in table.stdout


def test_run_refuses_an_incompatible_hybrid_pair_before_anything_starts(dlrun_home):
    """Horovod loads the image's Open MPI 3.1.2; this host's mpirun is 4.1.x: refused, with the fix."""
    proc = run_cli("run", "trivial", "--image", "pytorch1.0-horovod", "--runtime", "singularity",
                   "--launcher", "horovodrun", "--ranks-per-node", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("dlrun: error: refusing to run:")
    assert "openmpi 3.1.2" in line and "4.1 vs 3.1" in line and "fix:" in line
    assert "singularity is not on PATH" in line and "horovodrun is not on PATH" in line  # missing here too
    assert not dlrun_home.exists() or not list((dlrun_home / "runs").glob("*"))


def test_mismatch_is_a_warning_when_the_ranks_do_not_load_the_images_mpi():
    from matrix_catalog import matrix_plan

    from dlrun.preflight import preflight
    from dlrun.preflight.mpi_pairs import uses_image_mpi

    plan = matrix_plan("singularity", "mpirun", "tcp")
    assert not uses_image_mpi(plan)  # the PyTorch harness: rank ids from the environment, gloo/NCCL
    assert uses_image_mpi(matrix_plan("singularity", "horovodrun", "tcp"))
    from dlrun.catalog import load_catalog
    from dlrun.probe.host import probe_host

    image = load_catalog(host=probe_host()).image("pytorch1.0-horovod")  # pins Open MPI 3.1.2
    inventory = {"mpi": {"flavour": "openmpi", "version": "4.1.4"}, "fabrics": {"usable": ["tcp"]}}
    [finding] = [f for f in preflight(plan.model_copy(update={"image": image}), inventory) if f.check == "mpi-compat"]
    assert finding.level == "warn" and "do not load the image's MPI" in finding.message


def test_dry_run_warns_from_the_profiles_declared_mpi(dlrun_home):
    """TX-GAIA's default fabric is Omni-Path, which pytorch1.0-horovod's MPI (no PSM2) cannot use: an error,
    so the dry run is refused like the run would be; --skip-checks shows the script with every finding."""
    refused = run_cli("run", "resnet50", "--system", "txgaia", "--image", "pytorch1.0-horovod", "--dry-run")
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("dlrun: error: refusing to run: fabric opa but the image's openmpi 3.1.2")
    proc = run_cli("run", "resnet50", "--system", "txgaia", "--image", "pytorch1.0-horovod", "--dry-run",
                   "--skip-checks")
    assert proc.returncode == 0
    assert "dlrun: warn: host openmpi 4.0.1 and image openmpi 3.1.2" in proc.stderr
    assert "dlrun: warn: check fabric skipped (--skip-checks): fabric opa" in proc.stderr
    assert "error" not in proc.stderr
    assert proc.stdout.startswith("#!/usr/bin/env bash")
    tf = run_cli("run", "resnet50", "--system", "txgaia", "--image", "tf1.14-nccl", "--dry-run")
    assert tf.returncode == 0 and "mpi-compat" not in tf.stderr and "error" not in tf.stderr


def test_preflight_warns_when_slurm_lacks_the_pmi_plugin():
    from matrix_catalog import matrix_plan

    from dlrun.preflight import preflight

    inventory = node_inventory()
    plan = matrix_plan("host", "srun", "tcp")
    inventory["mpi"]["slurm_mpi_plugins"] = ["pmix", "pmi2"]
    assert not [f for f in preflight(plan, inventory) if f.check == "pmi"]
    inventory["mpi"]["slurm_mpi_plugins"] = ["pmi2", "none"]
    [finding] = [f for f in preflight(plan, inventory) if f.check == "pmi"]
    assert finding.level == "warn" and "srun --mpi=pmix" in finding.message
