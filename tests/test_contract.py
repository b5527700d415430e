"""The launcher/harness contract (launcher/dlrun/harness/harness_contract.py, harness_result_schema.py): every
fact both sides need exists once; the result is checked against one schema on both sides; an LLM's MFU is
quoted against the matmul rate in the type it trains in, for `run` and `reproduce` alike; no Plan is edited
once `resolve_plan` made it."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from dlrun.harness import harness_contract as contract
from dlrun.harness import harness_result_schema as schema
from dlrun.measure import matmul_record
from dlrun.results.store import Store

SOURCES = sorted((REPO / "launcher" / "dlrun").rglob("*.py"))
CONTRACT_FILES = {"harness_contract.py", "harness_result_schema.py"}


def _outside_contract():
    for path in SOURCES:
        if path.name not in CONTRACT_FILES:
            yield path, path.read_text()


def _tuples(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts) and node.elts:
            yield node, {e.value for e in node.elts}


# --------------------------------------------------------------------------------------- facts declared once
def test_the_precision_list_is_declared_once():
    """No module but the contract lists the precisions (a subset, such as what one code can run, is not the
    list; CODE_PRECISIONS in the contract says those too)."""
    full = set(contract.PRECISIONS)
    found = [f"{path.relative_to(REPO)}:{node.lineno}" for path, text in _outside_contract()
             for node, values in _tuples(ast.parse(text)) if values == full]
    assert found == []


def test_the_amp_rule_is_decided_once():
    """What amp computes in is decided by contract.amp_dtype alone: nobody else picks float16 for a GPU and
    bfloat16 for a CPU."""
    rule = re.compile(r"""["']float16["']\s+if\s+\w+(?:\.\w+)?\s*==\s*["']cuda["']\s+else\s+["']bfloat16["']""")
    assert [str(path.relative_to(REPO)) for path, text in _outside_contract() if rule.search(text)] == []
    assert [contract.amp_dtype(d, k, c) for d, k, c in (
        ("cuda", "cnn-training", "pytorch"), ("cpu", "cnn-training", "pytorch"), ("cuda", contract.LLM_KIND, "pytorch"),
        ("cuda", None, "tensorflow"), ("cuda", None, "tf_cnn_benchmarks"))] == [
        "float16", "bfloat16", "bfloat16", "bfloat16", "float16"]


def test_the_shard_pattern_and_the_rank_variable_order_exist_once():
    shard = re.compile(r"-of-")
    rank_chain = re.compile(r"\$\{(RANK|LOCAL_RANK|OMPI_COMM_WORLD_RANK|SLURM_PROCID|JSM_NAMESPACE_RANK):-")
    offenders = []
    for path, text in _outside_contract():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "compile" and node.args and \
                    isinstance(node.args[0], ast.Constant) and shard.search(str(node.args[0].value)):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: a shard pattern")
        if rank_chain.search(text):
            offenders.append(f"{path.relative_to(REPO)}: a chain of rank variables")
        for node, values in _tuples(ast.parse(text)):
            if {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID"} <= values or {"OMPI_COMM_WORLD_LOCAL_RANK",
                                                                     "SLURM_LOCALID"} <= values:
                if "launchers" not in path.parts:  # a launcher's own variables, which it passes on
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: a list of rank variables")
    assert offenders == []
    assert contract.tfrecord_split("train-00003-of-01024") == "train"
    assert contract.tfrecord_split("validation-00000-of-00128") == "validation"
    assert contract.tfrecord_split("train-3-of-4") is None


def test_the_result_field_names_are_declared_once():
    """Only the schema lists the result's fields: no harness file keeps a second list of them (as notes or as
    data), and every field the launcher's key reads is one the schema marks as deciding the key."""
    lists = re.compile(r"Result fields:")
    assert [p.name for p, text in _outside_contract() if lists.search(text)] == []
    key_source = "".join((REPO / "launcher" / "dlrun" / "results" / name).read_text()
                         for name in ("key.py", "key_software.py"))
    read = set(re.findall(r"""extra(?:\.get\(|\[)["'](\w+)["']""", key_source))
    # what other tools' parsers record, not the harness: fio's JSON (execute/storage.py), tf_cnn_benchmarks' log
    others = {"fio", "tensorflow"}
    assert read - others - set(schema.KEY_FIELDS) == set(), "a field the key reads is not marked key in the schema"


# ------------------------------------------------------------------------------------ the schema, both sides
def _record(**fields):
    base = {"metric": "throughput", "value": 10.0, "unit": "images/sec", "formula": "x", "status": "ok",
            "harness_version": "1", "world_size": 1, "num_devices": 1, "device": "cpu", "framework": "pytorch",
            "framework_version": "2.13.0", "model": "trivial", "precision": "fp32", "precision_ran": "fp32",
            "batch_size_per_rank": 4, "global_batch_size": 4, "timed_steps": 2, "warmup_steps": 1,
            "wall_time_s": 0.8}
    return {**base, **fields}


def test_the_schema_names_what_is_missing_or_mistyped():
    assert schema.result_problems(_record()) == []
    missing = {k: v for k, v in _record().items() if k != "wall_time_s"}
    assert schema.result_problems(missing) == [
        "field wall_time_s (timed steps' wall time, slowest rank's) is missing"]
    assert schema.result_problems(_record(world_size=True)) == ["field world_size is a boolean, not a int"]
    assert schema.result_problems(_record(value=float("nan"))) == ["field value is not finite"]
    assert schema.result_problems(_record(extra_field=1), strict=True) == [
        "field extra_field is not in the result schema"]
    # a site's own command prints the least record; the harness's marks itself with harness_version
    assert schema.result_problems({"metric": "latency", "value": 3.0, "unit": "us"}) == []


def test_every_field_the_harness_prints_is_declared(tmp_path):
    """A real training run of the harness: its record keeps the schema strictly (no undeclared field)."""
    import subprocess
    import sys

    from dlrun.paths import HARNESS_DIR

    proc = subprocess.run([sys.executable, str(HARNESS_DIR / "harness_pytorch.py"), "--model", "trivial",
                           "--batch-size", "2", "--steps", "2", "--warmup-steps", "1", "--device", "cpu",
                           "--threads", "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith(schema.RESULT_PREFIX))
    assert schema.result_problems(json.loads(line[len(schema.RESULT_PREFIX):]), strict=True) == []


@pytest.mark.slow
def test_a_result_missing_a_required_field_fails_the_run_in_one_line(dlrun_home, tmp_path):
    """A record that calls itself the harness's (harness_version) but lacks what a training result needs: the
    run is stored failed, and the reason is one line naming the field."""
    workloads = tmp_path / "xdg-config" / "dlrun" / "workloads"
    workloads.mkdir(parents=True)
    record = {k: v for k, v in _record().items() if k != "global_batch_size"}
    (workloads / "broken.yaml").write_text(json.dumps([{
        "name": "broken", "kind": "command", "description": "prints a harness record without its global batch",
        "result": {"format": "dlrun-result"}, "command": "echo 'DLRUN_RESULT " + json.dumps(record) + "'"}]))
    proc = run_cli("run", "broken", "--telemetry", "off")
    assert proc.returncode == 1
    reason = [line for line in proc.stderr.splitlines() if line.startswith("dlrun: error:")]
    assert len(reason) == 1 and "field global_batch_size" in reason[0] and "is missing" in reason[0], proc.stderr
    store = Store(dlrun_home / "results.sqlite")
    assert store.list_runs(1)[0]["status"] == "failed"


# ---------------------------------------------------------------------------- MFU against the type it trains in
def _ceilings(store: Store, system: str, rates: dict[str, tuple[float, str]], device: str) -> None:
    for number, (precision, (gflops, dtype)) in enumerate(rates.items()):
        row = {"metric": "matmul", "value": gflops, "unit": "GFLOP/s", "dtype": dtype, "size": 4096, "repeats": 3,
               "threads": 2, "device": device, "framework": "pytorch", "framework_version": "2.13.0"}
        run, rows = matmul_record(system, precision, row, now=1_700_000_000 + number)
        store.add_run(run, rows)


def test_an_llm_run_is_quoted_against_the_rate_of_the_type_it_trains_in(dlrun_home, catalog):
    """On a GPU, amp measures float16, while the harness trains LLMs in bfloat16: where the two rates differ,
    the plan takes the bfloat16 one (the old choice, fp16, was right only while the two rates matched)."""
    from dlrun.cli.options import store_ceilings
    from dlrun.plan import SiteInputs, resolve_plan

    store = Store(dlrun_home / "results.sqlite")
    _ceilings(store, "dgx-h100", {"fp16": (990_000.0, "float16"), "bf16": (760_000.0, "bfloat16"),
                                  "amp": (989_000.0, "float16")}, "cuda")
    site = SiteInputs(matmul_ceiling=store_ceilings(store))
    plan = resolve_plan(catalog, "llama3_tiny", system="dgx-h100", image="pytorch2.6-ngc24.12", precision="amp",
                        site=site)
    assert plan.matmul_gflops == 760_000.0
    # a CNN's amp is float16 on a GPU, and no ceiling is handed to it (MFU is an LLM figure)
    assert resolve_plan(catalog, "resnet50", system="dgx-h100", image="pytorch2.6-ngc24.12", precision="amp",
                        site=site).matmul_gflops is None


def test_on_a_cpu_whose_fp16_and_bf16_rates_differ_run_and_reproduce_take_the_bf16_one(dlrun_home, catalog):
    from dlrun.catalog.experiments import ExperimentSpec
    from dlrun.cli.options import store_ceilings
    from dlrun.plan import SiteInputs, resolve_plan
    from dlrun.reproduce.work import plan_points

    store = Store(dlrun_home / "results.sqlite")
    _ceilings(store, "localhost", {"fp16": (300.0, "float16"), "amp": (120.0, "bfloat16")}, "cpu")
    run_plan = resolve_plan(catalog, "llama3_tiny", precision="amp", site=SiteInputs(matmul_ceiling=store_ceilings(store)))
    assert run_plan.matmul_gflops == 120.0
    spec = catalog.experiment("localhost_scaling_smoke").model_dump(mode="json", exclude_none=True)
    spec.update(id="llm_tiny_amp_localhost", axes=[
        {"name": "model", "values": [{"paper": "tiny", "dlrun": "llama3_tiny"}]},
        {"name": "precision", "values": [{"paper": "BF16", "dlrun": "amp"}]}])
    works = plan_points(catalog, ExperimentSpec.model_validate(spec), "localhost", where={}, repeats=None,
                        local_image=None, store=store)
    assert [work.plan.matmul_gflops for work in works if work.plan] == [120.0]
    assert all("--matmul-gflops" in work.rendered.script for work in works if work.plan)


# ------------------------------------------------------------------------------------- the Plan, finished once
def test_no_plan_is_edited_outside_the_plan_package():
    offenders = []
    for path in SOURCES:
        if "plan" in path.relative_to(REPO / "launcher" / "dlrun").parts[:1]:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bplan\.model_copy\(", line) or re.search(r"model_copy\(update=", line) and \
                    "image" not in line:
                offenders.append(f"{path.relative_to(REPO)}:{number}")
    assert offenders == []


def test_the_contract_imports_nothing_and_runs_on_python_3_6():
    for name in CONTRACT_FILES | {"harness_node.py"}:
        tree = ast.parse((REPO / "launcher" / "dlrun" / "harness" / name).read_text())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert imported <= {"math", "re", "collections", "os", "platform", "sys", "time"}, (name, imported)
    assert Path(contract.__file__).name == "harness_contract.py"
