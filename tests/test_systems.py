"""System profiles: every system of the seeds (plus DGX H100 and localhost) renders a complete, correct job
with `dlrun run resnet50 --system S --dry-run`, and says where its values come from."""
from __future__ import annotations

import subprocess

import pytest
from conftest import cli_json, run_cli
from golden_files import shellcheck_path

from dlrun.catalog import load_catalog

from dlrun.probe.host import probe_host

SYSTEMS = ["txgaia", "dgx2", "dgx1v", "aws-p3dn", "ac922", "rtx-ts4", "summitdev", "prace-1080ti", "dgx-h100",
           "dgx-h200", "dgx-b200", "localhost"]
SEED_DOCS = {"txgaia": "Samsi et al.", "dgx2": "Ren et al.", "dgx1v": "Ren et al.", "aws-p3dn": "Ren et al.",
             "ac922": "Ren et al.", "rtx-ts4": "Ren et al.", "summitdev": "Han et al.",
             "prace-1080ti": "PRACE Best Practice Guide"}


def _dry_run(*args: str) -> str:
    proc = run_cli("run", *args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_seed_system_has_a_profile(dlrun_home):
    assert set(SYSTEMS) <= set(load_catalog(host=probe_host()).systems)


@pytest.mark.parametrize("system", SYSTEMS)
def test_profile_cites_its_sources(dlrun_home, system):
    spec = load_catalog(host=probe_host()).system(system)
    assert spec.sources and all(source.doc and source.where for source in spec.sources)
    if system in SEED_DOCS:
        assert any(SEED_DOCS[system] in source.doc for source in spec.sources)
        assert any(source.about for source in spec.sources), "say which values each source backs"


#: Systems whose default image cannot run there: DGX B200's Blackwell needs CUDA 12.8, dlrun's newest image has 12.6
#: (its profile says so); the rule refuses the job, and --skip-checks shows what it would be.
REFUSED_DEFAULT = {"dgx-b200": "rule cuda-target: image pytorch2.6-ngc24.12's CUDA 12.6.3"}


@pytest.mark.parametrize("system", SYSTEMS)
def test_dry_run_renders_and_passes_shellcheck(dlrun_home, tmp_path, system):
    spec = load_catalog(host=probe_host()).system(system)
    if system in REFUSED_DEFAULT:
        proc = run_cli("run", "resnet50", "--system", system, "--dry-run")
        assert proc.returncode == 2 and REFUSED_DEFAULT[system] in proc.stderr
    skip = ["--skip-checks"] if system in REFUSED_DEFAULT else []
    scripts = [_dry_run("resnet50", "--system", system, "--nodes", "1", *skip)]
    if spec.nodes > 1:
        scripts.append(_dry_run("resnet50", "--system", system, "--nodes", "2", *skip))
    tensorflow = load_catalog(host=probe_host()).image(spec.default_image).framework == "tensorflow"
    for index, text in enumerate(scripts):
        if tensorflow:  # the seeds' TensorFlow stacks run tf_cnn_benchmarks
            assert "tf_cnn_benchmarks.py --model=resnet50_v1.5" in text
        else:
            assert "harness_pytorch.py --model resnet50_v1.5" in text
        path = tmp_path / f"{system}-{index}.sh"
        path.write_text(text)
        proc = subprocess.run([shellcheck_path(), "--severity=style", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout
        assert subprocess.run(["bash", "-n", str(path)]).returncode == 0


def test_dgx2_one_rank_per_gpu_with_the_papers_settings(dlrun_home):
    text = _dry_run("resnet50", "--system", "dgx2")
    last = text.strip().splitlines()[-1]
    assert last.startswith("exec mpirun -np 16 -H localhost:16 --bind-to none --map-by slot")
    assert "--batch-size 256" in last and "--data-workers 4" in last and "--expected-world-size 16" in last
    assert "docker run" in last and "--gpus all" in last and "--ipc=host" in last
    assert "numa=(0 0 0 0 0 0 0 0 1 1 1 1 1 1 1 1)" in last
    assert "--threads 3" in last  # 48 cores / 16 ranks
    assert "--batch-size 128" in _dry_run("resnet152", "--system", "dgx2")


def test_rtx_uses_the_quarter_batch(dlrun_home):
    assert "--batch-size 64" in _dry_run("resnet50", "--system", "rtx-ts4")
    assert "--batch-size 64" in _dry_run("resnet101", "--system", "rtx-ts4")


def test_txgaia_omni_path_and_roce(dlrun_home):
    opa = _dry_run("resnet50", "--system", "txgaia", "--nodes", "2")
    assert "#SBATCH --nodes=2" in opa and "#SBATCH --ntasks-per-node=2" in opa and "#SBATCH --gpus-per-node=2" in opa
    assert "export FI_PROVIDER=psm2" in opa and "-mca mtl ofi -mca mtl_ofi_provider_include psm2" in opa
    assert "-B /dev/hfi1_0:/dev/hfi1_0" in opa and "numa=(1 1)" in opa
    assert "mpirun -np 4 -H \"${DLRUN_HOSTS}\"" in opa and "singularity exec --nv" in opa
    roce = _dry_run("resnet50", "--system", "txgaia", "--nodes", "2", "--fabric", "roce")
    assert "gid_attrs/types" in roce and 'export NCCL_IB_GID_INDEX="${DLRUN_ROCE_GID_INDEX}"' in roce
    assert "export NCCL_IB_HCA=mlx5_0:1" in roce and "-mca pml ucx" in roce
    bad = run_cli("run", "resnet50", "--system", "txgaia", "--fabric", "ib", "--dry-run")
    assert bad.returncode == 2 and "--fabric ib is not a fabric of system 'txgaia'; valid: opa, roce" in bad.stderr


def test_ac922_lsf_jsrun_resource_sets(dlrun_home):
    text = _dry_run("resnet50", "--system", "ac922", "--nodes", "4")
    assert "#BSUB -nnodes 4" in text and '#BSUB -alloc_flags "smt4"' in text
    assert ("jsrun --nrs 16 --rs_per_host 4 --tasks_per_rs 1 --cpu_per_rs 10 --gpu_per_rs 1 --bind packed:10"
            in text)
    assert "--batch-size 256" in text and "singularity exec --nv" in text and "powerai1.6" in text


def test_summitdev_ip_over_ib(dlrun_home):
    text = _dry_run("resnet50", "--system", "summitdev", "--nodes", "2")
    assert "export NCCL_SOCKET_IFNAME=ib0" in text and "export NCCL_IB_DISABLE=1" in text
    assert "--batch_size=32" in text  # 128 images per node over 4 GPUs (tf_cnn_benchmarks' flag)
    # Han et al.'s parameter-server mode: one tf_cnn_benchmarks worker per node over its 4 GPUs (jsrun resource
    # set per host), parameter servers beside it, hosts from the allocation
    assert "jsrun --nrs 2 --rs_per_host 1" in text
    assert "--num_gpus=4 --variable_update=parameter_server" in text and "horovod" not in text


def test_prace_pbs_mpiexec(dlrun_home):
    text = _dry_run("resnet50", "--system", "prace-1080ti", "--nodes", "4")
    assert "#PBS -l select=4:ncpus=16:mpiprocs=4:ngpus=4" in text
    assert text.strip().splitlines()[-1].startswith('mpiexec -np 16 -H "${DLRUN_HOSTS}"')
    assert "--batch-size 64" in text


def test_aws_p3dn_two_instances(dlrun_home):
    text = _dry_run("resnet50", "--system", "aws-p3dn", "--nodes", "2")
    assert "#SBATCH --nodes=2" in text and "--expected-world-size 16" in text and "--exclusive" in text


def test_dgx_h100_pyxis(dlrun_home):
    text = _dry_run("resnet50", "--system", "dgx-h100", "--nodes", "2")
    assert "srun --mpi=pmix --nodes=2 --ntasks=16 --ntasks-per-node=8" in text
    assert "--container-image=" in text and "--container-mounts=" in text and "--container-name=" in text
    assert "#SBATCH --gpus-per-node=8" in text and "#SBATCH --exclusive" in text


def test_systems_show_json_has_fabrics_and_affinity(dlrun_home):
    data = cli_json("systems", "show", "txgaia")
    assert data["fabric_config"]["opa"]["speed_gbps"] == 100
    assert data["gpus"]["numa_affinity"] == [1, 1]
    assert data["scheduler_options"]["exclusive"] is True
