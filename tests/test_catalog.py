"""Catalogs: built-ins load and validate; bad files say path:line: field: message."""
from __future__ import annotations

import os

import pytest
from conftest import cli_json, run_cli

from dlrun.catalog import CatalogError, load_catalog

from dlrun.probe.host import probe_host
from dlrun.catalog.loader import load_file
from dlrun.catalog.models import SystemSpec, WorkloadSpec

TABLE_II = {  # Ren et al. (BNL), Table II: parameters (M) and ops per instance (G)
    "alexnet": (61.10, 0.72),
    "resnet18": (11.69, 1.83),
    "resnet50": (25.56, 4.14),
    "resnet101": (44.55, 7.88),
    "resnet152": (60.19, 11.62),
}


def test_builtins_load(dlrun_home):
    catalog = load_catalog(host=probe_host())
    assert "host" in catalog.images
    assert "localhost" in catalog.systems
    assert {"alexnet", "resnet18", "resnet50", "resnet50_v1", "resnet50_v1.5", "resnet101", "resnet152",
            "vgg16", "inception3", "lenet"} <= set(catalog.workloads)


def test_localhost_is_detected(dlrun_home):
    data = cli_json("systems", "show", "localhost")
    assert data["detected"] is True
    assert data["nodes"] == 1
    assert data["cpu"]["sockets"] * data["cpu"]["cores_per_socket"] == len(os.sched_getaffinity(0))
    assert data["memory_gb"] > 0
    assert data["gpus"] is None  # no GPU on the machines that run these tests


def test_list_commands_json(dlrun_home):
    assert any(i["name"] == "host" and i["kind"] == "host" for i in cli_json("images", "list"))
    names = [w["name"] for w in cli_json("workloads", "list")]
    assert "resnet50" in names and names == sorted(names, key=names.index)
    assert "localhost" in [s["name"] for s in cli_json("systems", "list")]


@pytest.mark.parametrize("name", sorted(TABLE_II))
def test_workload_show_matches_table_ii(dlrun_home, name):
    """Parameters exact to 0.01 M and ops within 2% of Ren et al. Table II, counted on the harness's models."""
    params_m, ops_g = TABLE_II[name]
    data = cli_json("workloads", "show", name)
    facts = data["model_facts"]
    assert round(facts["params"] / 1e6, 2) == params_m
    assert abs(facts["forward_macs"] / 1e9 - ops_g) / ops_g <= 0.02, facts
    assert data["published_params"]["source"]["where"] == "Table II"


def test_resnet50_v1_has_fewer_ops_than_v15(dlrun_home):
    v1 = cli_json("workloads", "show", "resnet50_v1")["model_facts"]
    v15 = cli_json("workloads", "show", "resnet50_v1.5")["model_facts"]
    assert v1["params"] == v15["params"]
    assert v1["forward_macs"] < 0.96 * v15["forward_macs"]


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_bad_field_reports_path_line_field(tmp_path):
    bad = _write(tmp_path / "workloads" / "bad.yaml",
                 "- name: ok\n  description: fine\n  model: resnet18\n"
                 "- name: broken\n  description: bad batch\n  model: resnet18\n  default_batch_size: -4\n")
    with pytest.raises(CatalogError) as exc:
        load_file(WorkloadSpec, bad)
    assert str(exc.value).startswith(f"{bad}:7: default_batch_size: ")
    assert "greater than 0" in str(exc.value)


def test_unknown_field_and_nested_field_lines(tmp_path):
    bad = _write(tmp_path / "systems" / "s.yaml",
                 "name: s\ndescription: d\nnodes: 2\nmemory_gb: 10\ncpu:\n  sockets: 2\n  cores_per_socket: x\n")
    with pytest.raises(CatalogError, match=r"s\.yaml:7: cpu\.cores_per_socket: "):
        load_file(SystemSpec, bad)
    typo = _write(tmp_path / "systems" / "t.yaml",
                  "name: t\ndescription: d\nnodes: 2\nmemory_gb: 10\nnodez: 3\ncpu: {cores_per_socket: 4}\n")
    with pytest.raises(CatalogError, match=r"t\.yaml:5: nodez: Extra inputs are not permitted"):
        load_file(SystemSpec, typo)


def test_invalid_yaml_reports_line(tmp_path):
    bad = _write(tmp_path / "workloads" / "y.yaml", "- name: a\n  description: [unclosed\n")
    with pytest.raises(CatalogError, match=r"y\.yaml:\d+: invalid YAML"):
        load_file(WorkloadSpec, bad)


def test_bad_user_catalog_is_a_one_line_cli_error(dlrun_home, tmp_path):
    _write(tmp_path / "site" / "workloads" / "w.yaml", "- name: w\n  description: d\n  model: m\n  steps: 3\n")
    proc = run_cli("workloads", "list", env={"DLRUN_PATH": str(tmp_path / "site")})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "w.yaml:4: steps: Extra inputs are not permitted" in proc.stderr


def test_user_catalog_adds_and_overrides(dlrun_home, tmp_path):
    _write(tmp_path / "site" / "workloads" / "mine.yaml",
           "name: resnet50\ndescription: site override\nmodel: resnet50\n")
    data = cli_json("workloads", "show", "resnet50", env={"DLRUN_PATH": str(tmp_path / "site")})
    assert data["description"] == "site override" and data["model"] == "resnet50"


def test_allreduce_workloads(dlrun_home):
    catalog = load_catalog(host=probe_host())
    small, ren = catalog.workload("allreduce"), catalog.workload("allreduce_1mb_1gb")
    assert small.kind == ren.kind == "allreduce" and small.model is None and small.label == "allreduce"
    assert (small.min_bytes, small.max_bytes, small.size_factor) == (8, 64 << 20, 2)
    # Ren et al. Sec. IV-A: 1 MB to 1 GB, 500 iterations per point
    assert (ren.min_bytes, ren.max_bytes, ren.default_steps) == (1 << 20, 1 << 30, 500)
    assert ren.sources[0].where == "Sec. IV-A, Fig. 2"
    shown = cli_json("workloads", "show", "allreduce")
    assert shown["kind"] == "allreduce" and "model_facts" not in shown


def test_collective_and_nccl_tests_workloads(dlrun_home):
    catalog = load_catalog(host=probe_host())
    for name in ("broadcast", "allgather", "reducescatter", "alltoall", "broadcast_1mb_1gb"):
        work = catalog.workload(name)
        assert work.kind == name.split("_")[0] and not work.trains and work.sources, name
    assert catalog.workload("broadcast_1mb_1gb").sources[0].where == "Sec. IV-A, Fig. 2b"
    tests = {name: w.nccl_test for name, w in catalog.workloads.items() if w.kind == "nccl-tests"}
    assert tests == {f"nccl_{t}": t for t in ("all_reduce_perf", "all_gather_perf", "broadcast_perf",
                                              "reduce_scatter_perf", "alltoall_perf", "sendrecv_perf")}
    assert catalog.workload("sendrecv").measures == "send/receive between every pair of ranks"
    assert catalog.workload("alltoall").measures == "all-to-all"
    assert catalog.workload("nccl_alltoall_perf").label == "alltoall_perf"


@pytest.mark.parametrize("text, message", [
    ("- {name: w, description: d}\n", "a cnn-training workload needs `model`"),
    ("- {name: w, description: d, kind: bert-finetuning}\n", "a bert-finetuning workload needs `model`"),
    ("- {name: w, description: d, kind: allreduce, model: resnet18}\n", "kind allreduce trains no model"),
    ("- {name: w, description: d, kind: allreduce, min_bytes: 64, max_bytes: 8}\n",
     "min_bytes 64 exceeds max_bytes 8"),
    ("- {name: w, description: d, kind: gather}\n", "Input should be 'cnn-training', 'bert-finetuning', 'llm-pretraining', 'allreduce'"),
    ("- {name: w, description: d, kind: nccl-tests}\n", "a nccl-tests workload needs `nccl_test`"),
    ("- {name: w, description: d, kind: broadcast, nccl_test: broadcast_perf}\n",
     "kind broadcast runs no nccl-tests binary"),
    ("- {name: w, description: d, kind: nccl-tests, nccl_test: 'x; rm -rf /'}\n", "String should match pattern"),
])
def test_workload_kind_rules(tmp_path, text, message):
    bad = tmp_path / "w.yaml"
    bad.write_text(text)
    with pytest.raises(CatalogError) as err:
        load_file(WorkloadSpec, bad)
    assert message in str(err.value) and str(bad) in str(err.value)
