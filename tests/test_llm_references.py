"""Today's systems and the LLM pretraining numbers published for them: the DGX H200 and DGX B200 profiles
(dense peaks from datasheets that print them with sparsity), and the experiments that declare NVIDIA's
published Llama 3 8B rates with the rows they quote, rendered for the systems that have those GPUs."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema
import pytest
import yaml
from conftest import run_cli
from golden_files import shellcheck_path

from dlrun.catalog.capabilities import disagreements, has
from dlrun.catalog import CatalogError
from dlrun.catalog.experiment_points import expand
from dlrun.catalog.experiments import ExperimentSpec
from dlrun.catalog.loader import load_file
from dlrun.catalog.models import peak_for
from dlrun.paths import HARNESS_DIR, builtin_root
from dlrun.harness import describe_llm

NEW_SYSTEMS = ("dgx-h200", "dgx-b200")
DGXC = "EL_dgxc_llama31_8b_bf16"
BRIDGE = "EL_megatron_bridge_llama3_8b_fp8"
# (system, dense bf16, dense fp8, fp32 TFLOPS per GPU, GPU memory GB, HBM GB/s, the datasheet's sparse bf16)
PEAKS = [("dgx-h200", 989.5, 1979, 67, 141, 4800, "1,979"), ("dgx-b200", 2250, 4500, 75, 180, 7700, "4.5 PFLOPS")]
#: HBM bandwidth per GPU, GB/s: what memory-bound LLM steps are bounded by on each generation
BANDWIDTHS = {"dgx-h100": 3350, "dgx-h200": 4800, "dgx-b200": 7700}


@pytest.mark.parametrize("system, bf16, fp8, fp32, memory, bandwidth, sparse", PEAKS)
def test_profiles_carry_dense_peaks_halved_from_the_sparse_figures_they_quote(catalog, system, bf16, fp8, fp32,
                                                                            memory, bandwidth, sparse):
    gpus = catalog.system(system).gpus
    peaks = {peak.precision: peak for peak in gpus.peak}
    assert (peaks["bf16-tensor"].tflops, peaks["fp8-tensor"].tflops, peaks["fp32"].tflops) == (bf16, fp8, fp32)
    assert peaks["fp16-tensor"].tflops == bf16 and peaks["tf32-tensor"].tflops < bf16
    assert peak_for(gpus.peak, "amp").tflops == bf16  # what an amp run's MFU is measured against
    assert sparse in peaks["bf16-tensor"].source.note and "sparsity, halved" in peaks["bf16-tensor"].source.note
    assert "halved" in peaks["fp8-tensor"].source.note and "halved" not in peaks["fp32"].source.note
    assert (gpus.count_per_node, gpus.memory_gb, gpus.memory_bandwidth_gbs) == (8, memory, bandwidth)
    assert catalog.system(system).fabric_config["ib"].links == 8


def test_every_current_profile_states_its_hbm_bandwidth_with_a_source(catalog):
    for system, bandwidth in BANDWIDTHS.items():
        spec = catalog.system(system)
        assert spec.gpus.memory_bandwidth_gbs == bandwidth
        assert any("gpus.memory_bandwidth_gbs" in (source.about or "") for source in spec.sources), system


def test_profiles_say_why_the_sxm_part_and_cite_each_value(catalog):
    for system in NEW_SYSTEMS:
        spec = catalog.system(system)
        cited = " ".join(source.about or "" for source in spec.sources)
        for field in ("cpu", "memory_gb", "gpus.peak", "gpus.memory_bandwidth_gbs", "fabric_config.ib", "nodes"):
            assert field in cited, (system, field)
    h200 = " ".join(source.note or "" for source in catalog.system("dgx-h200").sources)
    assert "H200 NVL" in h200 and "SXM part" in h200
    b200 = " ".join(source.note or "" for source in catalog.system("dgx-b200").sources)
    assert "GB200 column" in b200 and "HGX B200 part" in b200 and "CUDA 12.8" in b200


@pytest.mark.parametrize("system, device", [("dgx-h100", "NVIDIA H100 80GB HBM3"), ("dgx-h200", "NVIDIA H200"),
                                            ("dgx-b200", "NVIDIA B200")])
def test_the_harness_peak_table_agrees_with_the_profiles(catalog, system, device):
    """The in-container MFU and the profile's peak are two copies of one datasheet figure: they must not drift."""
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import harness_pytorch_mfu as m; "
            "print(json.dumps(m.device_peak(sys.argv[2], 'amp')))")
    out = subprocess.run([sys.executable, "-c", code, str(HARNESS_DIR), device], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out)[0] == peak_for(catalog.system(system).gpus.peak, "amp").tflops


@pytest.mark.parametrize("system", NEW_SYSTEMS)
def test_the_8b_model_renders_sharded_on_the_new_systems(dlrun_home, tmp_path, system):
    # DGX B200 needs CUDA 12.8 and dlrun's newest image has 12.6: refused, shown with --skip-checks
    skip = ["--skip-checks"] if system == "dgx-b200" else []
    if skip:
        refused = run_cli("run", "llama3_8b", "--system", system, "--nodes", "2", "--dry-run")
        assert refused.returncode == 2 and "rule cuda-target" in refused.stderr
    proc = run_cli("run", "llama3_8b", "--system", system, "--nodes", "2", "--dist", "fsdp", "--precision", "amp",
                   "--dry-run", *skip)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("srun --mpi=pmix --nodes=2 --ntasks=16 --ntasks-per-node=8 ")
    assert last.endswith("--precision amp --dist fsdp --timeout-s 1800 --device cuda --expected-world-size 16")
    path = tmp_path / f"{system}.sh"
    path.write_text(proc.stdout)
    check = subprocess.run([shellcheck_path(), "--severity=style", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


# ------------------------------------------------------------------------------------------- experiments
def _refs(catalog, experiment):
    return {ref.id: ref for ref in catalog.experiment(experiment).references}


def test_dgxc_tokens_per_second_are_the_published_row_and_per_gpu_derivations_add_up(catalog):
    refs = _refs(catalog, DGXC)
    # the v25.04 table's step times: tokens/s = 8192 x (128 per 8 GPUs) / step time, as the recipe says
    steps = {8: 12.27, 16: 12.3, 32: 12.32, 64: 12.33, 128: 12.33}
    for gpus, step in steps.items():
        ref = refs[f"tokens_{gpus}gpu"]
        assert ref.conditions == {"gpus": gpus} and ref.unit == "tokens/s" and ref.metric == "throughput"
        assert f"| {int(ref.value)}" in ref.source.quote
        assert ref.value == pytest.approx(8192 * 16 * gpus / step, abs=1)
        per_gpu = re.search(r"= ([\d,]+) tokens/s", ref.note).group(1)
        assert float(per_gpu.replace(",", "")) == pytest.approx(ref.value / gpus, abs=1)
    assert "10,682 tokens/s" in refs["tokens_8gpu"].note  # issue 21's figure
    mfu = refs["mfu_8gpu"]
    assert (mfu.value, mfu.check, mfu.metric) == (62.47, "informational", "mfu")
    # the recipe's MFU: 128 sequences x 4.74E+14 FLOPs / 12.27 s / 8 GPUs / 989 TFLOPS
    assert 128 * 4.74e14 / 12.27 / 8 / 989e12 * 100 == pytest.approx(mfu.value, abs=0.05)


def test_dlrun_counts_the_recipes_flops_per_sequence():
    """The deviation says the two FLOP counts agree; the recipe's 4.74E+14 per 8192-token sequence."""
    facts = describe_llm("llama3_8b", 8192)
    assert facts["flops_per_token"] * 8192 == pytest.approx(4.74e14, rel=0.002)
    assert facts["params"] == 8030261248 and facts["matmul_params"] == 7504924672


def test_dgxc_points_render_for_the_h100_with_the_recipes_global_batch(catalog):
    points = expand(catalog.experiment(DGXC), catalog.system("dgx-h100"), catalog.workloads, catalog.images)
    assert [(p.gpus, p.nodes, p.skip) for p in points] == [(8, 1, None), (16, 2, None), (32, 4, None),
                                                             (64, 8, None), (128, 16, None)]
    first = points[0].plan_options()
    assert (first["dist"], first["grad_accum"], first["precision"], first["batch_size"]) == ("fsdp", 16, "amp", 1)


def test_reproduce_dry_run_renders_the_dgxc_points(dlrun_home):
    proc = run_cli("reproduce", DGXC, "--system", "dgx-h100", "--dry-run", "--script")
    assert proc.returncode == 0, proc.stderr
    harness = re.findall(r"harness_pytorch\.py (.*?)'?$", proc.stdout, flags=re.M)
    assert harness[0] == ("--model llama3_8b --threads 14 --batch-size 1 --steps 45 --warmup-steps 5 "
                          "--precision amp --dist fsdp --timeout-s 1800 --global-batch-size 128 --device cuda "
                          "--expected-world-size 8")
    assert "--global-batch-size 2048" in proc.stdout and "#SBATCH --nodes=16" in proc.stdout


def test_megatron_bridge_fp8_points_are_declared_and_skipped_for_the_missing_fp8(catalog):
    assert not has("precision:fp8", catalog) and has("precision:bf16", catalog)
    assert not [line for line in disagreements(catalog) if line.startswith(BRIDGE)]
    spec = catalog.experiment(BRIDGE)
    assert spec.systems == ["dgx-h100", "dgx-b200"] and spec.status.requires == ["precision:fp8"]
    for system in spec.systems:
        (point,) = expand(spec, catalog.system(system), catalog.workloads, catalog.images)
        assert point.skip and "FP8" in point.skip
    refs = _refs(catalog, BRIDGE)
    h100, b200 = refs["h100_tokens_per_gpu"], refs["b200_tokens_per_gpu"]
    assert "| 14451 | 744" in h100.source.quote and h100.value == 14451 * 8
    assert "| 30624 (29521) | 1576 (1519)" in b200.source.quote and b200.value == 30624 * 8
    assert refs["b200_over_h100"].value == pytest.approx(30624 / 14451, abs=0.005)
    assert refs["h100_model_tflops"].value == pytest.approx(744 / 1979 * 100, abs=0.05)
    assert refs["b200_model_tflops"].value == pytest.approx(1576 / 4500 * 100, abs=0.05)


def test_reproduce_refuses_nothing_and_says_why_each_fp8_point_is_skipped(dlrun_home):
    for system in ("dgx-h100", "dgx-b200"):
        proc = run_cli("reproduce", BRIDGE, "--system", system, "--dry-run")
        assert proc.returncode == 0, proc.stderr
        assert "needs-feature" in proc.stdout and "no FP8" in " ".join(proc.stdout.split())


def test_schema_accepts_the_llm_experiments_and_refuses_an_unknown_dist(tmp_path):
    validator = jsonschema.Draft202012Validator(ExperimentSpec.model_json_schema())
    folder = builtin_root() / "recipes" / "experiments"
    for name in (DGXC, BRIDGE):
        assert not list(validator.iter_errors(yaml.safe_load((folder / f"{name}.yaml").read_text()))), name
    text = (folder / f"{DGXC}.yaml").read_text()
    line = text[:text.index("dist: fsdp")].count("\n") + 1
    path = tmp_path / "e.yaml"
    path.write_text(text.replace("dist: fsdp", "dist: zero3"))
    with pytest.raises(CatalogError) as err:
        load_file(ExperimentSpec, path)
    assert str(err.value).startswith(f"{path}:{line}: settings.0.dist: Input should be 'ddp', 'horovod' or 'fsdp'")
