"""What a newcomer meets first: an empty answer to a valid question, --skip-checks on a submit host, doctor on a
combination other than the system's default, the TensorFlow 2 harness without Horovod refused before launch,
compare's filters, the regression table's columns, quotes shown once, and matmul's progress line.
Real command lines in subprocesses throughout (a real fake-batch submission where a batch system is meant)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from compare_data import add
from conftest import cli_json, run_cli

from dlrun.errors import unquoted
from dlrun.results.store import Store


def _one_line(proc, code: int, *needles: str) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    for needle in needles:
        assert needle in line, line
    return line


# ------------------------------------------------------------------------------------------ results list
def test_a_catalog_name_without_stored_runs_is_an_empty_answer_and_a_typo_stays_an_error(dlrun_home):
    empty = run_cli("results", "list", "--system", "dgx2")
    assert (empty.returncode, empty.stdout.strip(), empty.stderr) == (0, "no runs match --system dgx2", "")
    assert cli_json("results", "list", "--system", "dgx2", "--workload", "resnet50") == []
    nothing = run_cli("results", "list")
    assert nothing.returncode == 0 and nothing.stdout.startswith("no runs stored yet")
    _one_line(run_cli("results", "list", "--system", "dgx3"), 2,
              "bad --system 'dgx3': no stored run has any system, and no catalog defines it; did you mean 'dgx2'?")
    _one_line(run_cli("results", "list", "--site", "nowhere"), 2, "bad --site 'nowhere': no stored run has any site")
    assert not (dlrun_home / "results.sqlite").exists()  # listing creates nothing
    add(Store(dlrun_home / "results.sqlite"), [100.0], system="dgx1v")
    _one_line(run_cli("results", "list", "--system", "dgx-2"), 2,
              "bad --system 'dgx-2': no stored run has it; did you mean 'dgx2'? stored: dgx1v")
    assert run_cli("results", "list", "--system", "dgx2").stdout.strip() == "no runs match --system dgx2"


# ------------------------------------------------------------------------------------------ --skip-checks
@pytest.mark.slow
def test_skip_checks_submits_an_image_this_host_has_no_lock_entry_for_and_says_so_as_warnings(dlrun_home, tmp_path):
    """A login node submits a Charliecloud job whose image only the compute nodes' site has recorded: refused
    without --skip-checks (one line); with it, every skipped check is a warning (no `error:`), the job is
    submitted, and the run records that the image was not verified."""
    import fake_batch

    env = {**fake_batch.install(tmp_path / "batch"), "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock"),
           "DLRUN_IMAGES_DIR": str(tmp_path / "images")}
    args = ("run", "trivial", "--system", "fake-slurm", "--image", "cpu-reference", "--runtime", "charliecloud",
            "--steps", "1")
    _one_line(run_cli(*args, env=env), 2, "refusing to run: image cpu-reference", "has no digest in",
              "--skip-checks runs anyway")
    assert not (dlrun_home / "runs").exists()
    proc = run_cli(*args, "--skip-checks", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the fake node has no such image: the job fails
    assert "error" not in proc.stderr.split("dlrun: submitted slurm job 7")[0], proc.stderr
    assert "dlrun: warn: check image skipped (--skip-checks): image cpu-reference" in proc.stderr
    [run] = cli_json("results", "list", env=env)
    provenance = cli_json("results", "show", run["id"], env=env)["provenance"]
    assert provenance["image_check"]["verified"] is False
    assert provenance["image_check"]["reason"].startswith("--skip-checks: ")
    assert "#SBATCH" in (Path(run["run_dir"]) / "run.sh").read_text()


# ------------------------------------------------------------------------------------------ doctor
def test_doctor_checks_the_launcher_runtime_and_fabric_given(dlrun_home):
    default = cli_json_any("doctor", "--system", "txgaia", "--image", "pytorch1.0-horovod")
    assert default["plan"]["fabric"] == "opa"
    assert any(c["check"] == "fabric" and "fabric opa" in c["message"] for c in default["checks"])
    roce = cli_json_any("doctor", "--system", "txgaia", "--image", "pytorch1.0-horovod", "--fabric", "roce",
                        "--launcher", "srun")
    assert (roce["plan"]["fabric"], roce["plan"]["launcher"]) == ("roce", "srun")
    assert not any("fabric opa" in c["message"] for c in roce["checks"])
    charliecloud = cli_json_any("doctor", "--image", "cpu-reference", "--runtime", "charliecloud")
    assert (charliecloud["plan"]["system"], charliecloud["plan"]["runtime"]) == ("localhost", "charliecloud")
    _one_line(run_cli("doctor", "--launcher", "mpirunn"), 2, "unknown launcher 'mpirunn'", "mpirun")
    _one_line(run_cli("doctor", "--system", "txgaia", "--fabric", "tcp"), 2,
              "--fabric tcp is not a fabric of system 'txgaia'; valid: opa, roce")


def cli_json_any(*args: str) -> dict:
    """doctor's JSON, whatever its verdict (exit 1 when a check fails on this node)."""
    proc = run_cli(*args, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


# ------------------------------------------------------------------------------------------ TF 2 without Horovod
def test_the_tf2_harness_with_several_processes_and_no_horovod_is_refused_before_launch(dlrun_home, tmp_path):
    from dlrun.paths import HARNESS_DIR

    site = tmp_path / "site" / "images"
    site.mkdir(parents=True)
    (site / "tf.yaml").write_text(
        f"name: tf-no-horovod\ndescription: this host's TensorFlow 2 without Horovod\nkind: host\n"
        f"arch: [{os.uname().machine}]\nframework: tensorflow\nruns: dlrun-harness\npython: {sys.executable}\n"
        f"harness_dir: {HARNESS_DIR}\n")
    env = {"DLRUN_PATH": str(tmp_path / "site")}
    for extra in ((), ("--dry-run",)):
        proc = run_cli("run", "resnet50", "--image", "tf-no-horovod", "--ranks-per-node", "2", *extra, env=env)
        _one_line(proc, 2, "refusing to run: dlrun's TensorFlow 2 harness runs 2 processes through Horovod, but "
                  "image tf-no-horovod has no Horovod with TensorFlow support", "make horovod",
                  "--ranks-per-node 1")
        assert proc.stdout == ""
    assert not (dlrun_home / "runs").exists()
    one = run_cli("run", "resnet50", "--image", "tf-no-horovod", "--dry-run", env=env)
    assert one.returncode == 0 and "harness_tensorflow.py" in one.stdout


def test_host_tf_has_horovod_only_when_horovod_was_built_with_tensorflow():
    from dataclasses import replace

    from dlrun.catalog.localhost import host_image, host_tf_image
    from dlrun.probe.host import probe_host

    facts = replace(probe_host(), horovod="0.28.1")
    assert host_tf_image(replace(facts, horovod_tensorflow=False)).horovod_release() is None
    assert host_tf_image(replace(facts, horovod_tensorflow=True)).horovod_release() == "0.28.1"
    assert host_image(replace(facts, horovod_tensorflow=False)).horovod_release() == "0.28.1"  # PyTorch's


# ------------------------------------------------------------------------------------------ compare
@pytest.fixture
def stored(dlrun_home):
    store = Store(dlrun_home / "results.sqlite")
    runs = {"fp32": add(store, [100.0, 101.0, 99.0]), "amp": add(store, [150.0, 151.0, 149.0], precision="amp"),
            "b32": add(store, [80.0, 81.0, 82.0], batch=32),
            "two": add(store, [190.0, 195.0, 192.0], devices=2),
            "nodes2": add(store, [300.0, 310.0, 305.0], devices=8, nodes=2)}
    return runs


def _compared(*args: str) -> set[str]:
    rows = cli_json("compare", *args)["rows"]
    return {run for row in rows for run in row["runs"]}


def test_compare_filters_by_precision_batch_size_and_nodes(stored):
    assert _compared("--precision", "amp") == set(stored["amp"])
    assert _compared("--batch-size", "32") == set(stored["b32"])
    assert _compared("--nodes", "2") == set(stored["nodes2"])
    assert _compared("--precision", "fp32", "--batch-size", "64", "--nodes", "1", "--by", "devices") == \
        set(stored["fp32"]) | set(stored["two"])
    _one_line(run_cli("compare", "--precision", "fp23"), 2, "bad --precision 'fp23'", "did you mean 'fp32'?")
    _one_line(run_cli("compare", "--precision", "bf16"), 1, "nothing to compare")  # a precision dlrun runs
    _one_line(run_cli("compare", "--nodes", "0"), 2, "bad --nodes 0; valid: a whole number of at least 1")
    _one_line(run_cli("compare", "--batch-size", "-4"), 2, "bad --batch-size -4")
    assert "--precision" in run_cli("compare", "--help").stdout


def test_a_regression_along_devices_names_devices_once(stored):
    proc = run_cli("compare", "--mode", "regression", "--by", "devices", "--precision", "fp32", "--batch-size", "64",
                   "--nodes", "1")
    assert proc.returncode == 0, proc.stderr
    [header] = [line for line in proc.stdout.splitlines() if "baseline" in line and "verdict" in line]
    assert [cell.strip() for cell in header.strip("┃│ ").split("┃")][:3] == ["workload", "devices", "baseline geo. mean"]


def test_a_quote_given_in_quotation_marks_is_shown_in_one_pair(stored):
    proc = run_cli("compare", "--precision", "amp", "--reference", "140",
                   "--source", 'Ren et al.; Table III; "ResNet50 140 images/s"')
    assert proc.returncode == 0, proc.stderr
    assert 'note: source: Ren et al., Table III: "ResNet50 140 images/s"' in proc.stdout
    assert '""' not in proc.stdout
    assert unquoted("\u201cwords\u201d") == unquoted("'words'") == unquoted(' "words" ') == "words"
    assert unquoted('say "this" and "that"') == 'say "this" and "that"'  # not one pair around it all


# ------------------------------------------------------------------------------------------ measure matmul
def test_measure_matmul_shows_a_progress_line_while_it_runs(dlrun_home):
    from dlrun.measure import measure_matmul, products

    told = []
    row = measure_matmul("fp32", size=64, repeats=3, device="cpu", progress=lambda *a: told.append(a))
    assert [done for done, _, _ in told] == list(range(1, len(row["rates"]) * 5 + 1))
    assert {total for _, total, _ in told} == {products("fp32", 3, "cpu")}
    # a terminal (rich takes FORCE_COLOR as one) sees the line; it is gone once the table is printed
    proc = run_cli("measure", "matmul", "--size", "64", "--repeats", "2", "--precision", "amp",
                   env={"FORCE_COLOR": "1", "COLUMNS": "160"})
    assert proc.returncode == 0, proc.stderr
    assert "matmul amp bfloat16 torch.mm" in proc.stderr and "products of 64x64" in proc.stderr
    assert "4/4" in proc.stderr
