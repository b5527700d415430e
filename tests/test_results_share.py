"""Sharing results between sites through the real `dlrun` command: two dlrun homes with their own site and
system names run the same workload (`trivial`, for real), site A exports and signs with a real SSH key, site B
verifies, imports and compares; tampered bundles and a wrong signer are refused; flat tables read back with
pandas; a log imported twice is stored once."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from bundle_data import LOGS, allowed_signers, make_key, members, rebuild, regular
from conftest import run_cli

from dlrun.probe.cpu import cpu_inventory
from dlrun.results.exchange.export import TABLE_COLUMNS
from dlrun.results.fingerprint import short_cpu_name
from dlrun.results.exchange.import_log import import_log
from dlrun.results.site import local_site
from dlrun.results.store import Store

ARCH = "ppc64le" if platform.machine() == "ppc64le" else "aarch64" if platform.machine() == "aarch64" else "x86_64"
#: A site's own profile of this machine: each site names it differently, as two centres would.
SYSTEM = """name: {name}
description: "{site}'s CPU node (this machine, described by the site)"
arch: {arch}
nodes: 1
cpu: {{sockets: 1, cores_per_socket: 2}}
memory_gb: 4
fabrics: [tcp]
scheduler: local
launcher: mpirun
runtime: host
default_image: host
sources:
  - {{doc: "the site's own description", where: "-"}}
"""
SECRET = "hf_BundleTestSecretValue0123456789"        # given to the run with --env
EXPORTER_SECRET = "hf_ExportersOwnEnvironment987654"  # only in the exporting command's environment


def _site(root: Path, site: str, system: str) -> dict[str, str]:
    config = root / "config"
    (config / "dlrun" / "systems").mkdir(parents=True)
    (config / "dlrun" / "systems" / f"{system}.yaml").write_text(SYSTEM.format(name=system, site=site, arch=ARCH))
    return {"DLRUN_HOME": str(root / "home"), "XDG_CONFIG_HOME": str(config), "DLRUN_SITE": site}


def _runs(env: dict[str, str]) -> list[dict]:
    return json.loads(run_cli("results", "list", "--json", env=env, check=True).stdout)


def _one_digit_changed(data: bytes) -> bytes:
    """The first digit of the first numeric "value" changed: the line stays a valid run."""
    at = re.search(rb'"value": ?[0-9]', data).end() - 1
    return data[:at] + (b"8" if data[at:at + 1] == b"9" else b"9") + data[at + 1:]


def _error(proc, code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stderr.startswith("dlrun: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """Sites A and B, each with one real run of `trivial` on its own system profile, and A's signing key."""
    root = tmp_path_factory.mktemp("sites")
    a, b = _site(root / "a", "site-a", "alpha-cpu"), _site(root / "b", "site-b", "beta-cpu")
    common = ("run", "trivial", "--steps", "2", "--warmup-steps", "1", "--batch-size", "16")
    run_cli(*common, "--system", "alpha-cpu", "--env", f"HF_TOKEN={SECRET}", env=a, check=True)
    run_cli(*common, "--system", "beta-cpu", env=b, check=True)
    keys = root / "keys"
    alice, mallory = make_key(keys, "alice"), make_key(keys, "mallory")
    return {"a": a, "b": b, "root": root, "alice": alice,
            "allowed": allowed_signers(keys / "allowed_signers", {"ops@site-a.example.org": alice}),
            "wrong": allowed_signers(keys / "wrong_signers", {"ops@site-a.example.org": mallory})}


def test_two_sites_share_signed_results_and_compare_them(sites, tmp_path):
    a, b = sites["a"], sites["b"]
    bundle = tmp_path / "site-a.bundle"
    wrote = run_cli("results", "export", "--out", str(bundle), "--sign", str(sites["alice"]), "--with-logs",
                    env=a, check=True)
    assert f"wrote {bundle}: 1 runs from site site-a" in wrote.stdout and "signed with" in wrote.stdout

    # a wrong signer, and tampered copies, are refused in one line and add nothing
    assert "which is not an allowed signer in" in _error(
        run_cli("results", "import", str(bundle), "--allowed-signers", str(sites["wrong"]), env=b), 1)
    tampered = {
        # a valid run, changed (one digit of a result): each line is checked as it streams, only its hash tells
        "runs.jsonl": lambda items: [(i, _one_digit_changed(d) if i.name == "runs.jsonl" else d) for i, d in items],
        "manifest": lambda items: [(items[0][0], items[0][1].replace(b'"site": "site-a"', b'"site": "site-x"')),
                                   *items[1:]],
        "member": lambda items: [*items, regular("logs/zz/run.sh", b"rm -rf ~\n")],
    }
    messages = {"runs.jsonl": "member 'runs.jsonl' does not match its sha256 in the manifest",
                "manifest": "the signature of ops@site-a.example.org does not match manifest.json",
                "member": "member 'logs/zz/run.sh' is not listed in the manifest"}
    for name, change in tampered.items():
        bad = rebuild(bundle, tmp_path / f"{name}.bundle", change)
        assert messages[name] in _error(
            run_cli("results", "import", str(bad), "--allowed-signers", str(sites["allowed"]), env=b), 1)
    assert [run["site"] for run in _runs(b)] == ["site-b"]

    got = run_cli("results", "import", str(bundle), "--allowed-signers", str(sites["allowed"]), env=b, check=True)
    assert got.stdout == "imported 1 of 1 runs from site site-a (signed by ops@site-a.example.org, verified)\n"
    runs = {run["site"]: run for run in _runs(b)}
    assert (runs["site-a"]["origin"], runs["site-a"]["system"], runs["site-b"]["system"]) == \
        ("bundle", "alpha-cpu", "beta-cpu")
    imported_dir = Path(runs["site-a"]["run_dir"])
    assert imported_dir == Path(b["DLRUN_HOME"]) / "imported" / "site-a" / runs["site-a"]["id"]
    assert "DLRUN_RESULT {" in (imported_dir / "output.log").read_text()

    table = run_cli("compare", "--by", "site", "--workload", "trivial", "--baseline", "site-b", env=b, check=True)
    assert "throughput relative to site-b (images/sec)" in " ".join(table.stdout.split())
    assert re.search(r"│ trivial +│ trivial │ site-a │", table.stdout), table.stdout
    [row] = json.loads(run_cli("compare", "--by", "site", "--workload", "trivial", "--baseline", "site-b",
                               "--json", env=b, check=True).stdout)["rows"]
    assert (row["site"], row["baseline"], row["runs"], row["baseline_runs"]) == \
        ("site-a", "site-b", [runs["site-a"]["id"]], [runs["site-b"]["id"]])
    assert row["relative"] == pytest.approx(runs["site-a"]["value"] / runs["site-b"]["value"])

    again = run_cli("results", "import", str(bundle), "--allowed-signers", str(sites["allowed"]), env=b, check=True)
    assert "imported 0 of 1 runs" in again.stdout and "1 stored already" in again.stdout
    assert len(_runs(b)) == 2


def test_an_env_secret_travels_only_as_the_store_holds_it(sites, tmp_path):
    """Export copies what the store and the run directory hold, and reads nothing else: the exporting
    command's own environment never reaches the bundle, and the value given with --env is in the bundle
    exactly where the store keeps it: nowhere, since the store redacts it."""
    a = sites["a"]
    bundle = tmp_path / "secret.bundle"
    run_cli("results", "export", "--out", str(bundle), "--with-logs", env={**a, "HF_TOKEN": EXPORTER_SECRET},
            check=True)
    [stored] = [Store(Path(a["DLRUN_HOME"]) / "results.sqlite").get_run(run["id"]) for run in _runs(a)]
    items = {info.name: data for info, data in members(bundle)}
    assert not any(EXPORTER_SECRET.encode() in data for data in items.values())
    [record] = [json.loads(line) for line in items["runs.jsonl"].splitlines()]
    assert {key: value for key, value in record.items() if key != "inventory"} == stored
    assert SECRET not in json.dumps(stored)  # the store redacts it (secrets never written) ...
    assert not any(SECRET.encode() in data for data in items.values())  # ... and so the bundle never has it
    run_dir = Path(stored["run_dir"])
    logs = {name.split("/", 2)[2]: data for name, data in items.items() if name.startswith("logs/")}
    assert "plan.json" in logs and "output.log" in logs
    for relative, data in logs.items():
        assert data == (run_dir / relative).read_bytes()


def test_flat_exports_read_back_with_pandas(sites, tmp_path):
    env = {**sites["b"], "DLRUN_HOME": str(tmp_path / "home"), "DLRUN_SITE": "site-c"}
    bundle = tmp_path / "a.bundle"
    run_cli("results", "export", "--out", str(bundle), env=sites["a"], check=True)
    run_cli("results", "import", str(bundle), "--unsigned", env=env, check=True)
    run_cli("results", "import-log", str(LOGS / "nccl-tests/xxrjun_alltoall_sendrecv_2node.log"),
            "--system", "cluster00", env=env, check=True)
    stored = {run["id"]: run for run in _runs(env)}
    assert len(stored) == 3
    readers = {"csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True), "parquet": pd.read_parquet}
    for fmt, read in readers.items():
        out = tmp_path / f"runs.{fmt}"
        assert run_cli("results", "export", "--out", str(out), env=env, check=True).stdout == \
            f"wrote {out}: 3 rows ({fmt})\n"
        frame = read(out)
        assert list(frame.columns) == list(TABLE_COLUMNS), fmt
        assert {"verdict", "key_site", "key_cpu", "key_memory_gib", "key_gpu"} <= set(frame.columns), fmt
        assert sorted(frame["run_id"]) == sorted(stored), fmt
        for row in frame.to_dict("records"):
            run = stored[row["run_id"]]
            assert (row["site"], row["system"], row["value"], row["unit"]) == \
                (run["site"], run["system"], run["value"], run["unit"]), fmt
            assert row["key_hash"] == run["key_hash"] and str(row["key_system"]) == run["system"]
        assert set(frame["site"]) == {"site-a", "site-c"} and set(frame["metric"]) == {"throughput", "busbw"}


def test_a_log_imported_twice_is_stored_once(dlrun_home):
    log = LOGS / "tf_cnn_benchmarks/tensorflow23032_1gpu_nightly.log"
    first = run_cli("results", "import-log", str(log), "--system", "gtx1080ti-box", check=True)
    assert first.stdout.startswith(f"imported 1 run from {log}: ")
    second = run_cli("results", "import-log", str(log), "--system", "gtx1080ti-box", check=True)
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    assert second.stdout == f"nothing added: {log} (sha256 {digest[:12]}...) is stored already\n"
    [run] = json.loads(run_cli("results", "list", "--json", check=True).stdout)
    shown = json.loads(run_cli("results", "show", run["id"], "--json", check=True).stdout)
    assert (shown["origin"], shown["provenance"]["log_sha256"], shown["system"]) == \
        ("import-log", digest, "gtx1080ti-box")


def test_bad_input_is_one_line_and_writes_nothing(dlrun_home, tmp_path):
    log = LOGS / "horovod/issue712_pytorch_synthetic_4gpu.log"
    run_cli("results", "import-log", str(log), "--system", "box", check=True)
    out = tmp_path / "x.csv"
    assert "--with-logs applies to bundles, not to --format csv" in _error(
        run_cli("results", "export", "--out", str(out), "--with-logs"), 2)
    assert "unknown export format 'parket'; did you mean 'parquet'?" in _error(
        run_cli("results", "export", "--out", str(out), "--format", "parket"), 2)
    assert "bad --workload 'resnt50'" in _error(run_cli("results", "export", "--out", str(out), "-w", "resnt50"), 2)
    assert "no stored run matches the filters; nothing written" in _error(
        run_cli("results", "export", "--out", str(out), "--status", "failed"), 2)
    assert "this site has no name" in _error(
        run_cli("results", "export", "--out", str(tmp_path / "b.bundle"), env={"DLRUN_SITE": "local"}), 2)
    assert "--sign '/nonexistent/key': no such key file" in _error(
        run_cli("results", "export", "--out", str(tmp_path / "b.bundle"), "--sign", "/nonexistent/key",
                env={"DLRUN_SITE": "site-x"}), 2)
    assert not out.exists() and not (tmp_path / "b.bundle").exists() and list(tmp_path.glob(".*.tmp")) == []
    assert "cannot read bundle '/nonexistent.bundle'" in _error(
        run_cli("results", "import", "/nonexistent.bundle", "--unsigned"), 2)
    assert "--unsigned and --allowed-signers exclude each other" in _error(
        run_cli("results", "import", str(log), "--unsigned", "--allowed-signers", str(log)), 2)
    assert "not a gzip-compressed bundle, or damaged" in _error(run_cli("results", "import", str(log), "--unsigned"), 1)
    assert "--system must name the system" in _error(run_cli("results", "import-log", str(log), "--system", " "), 2)


def test_only_a_stored_run_with_the_same_log_counts_as_a_repeat(tmp_path):
    store = Store(tmp_path / "results.sqlite")
    pairs = import_log(LOGS / "nccl-tests/xxrjun_alltoall_sendrecv_2node.log", system="cluster00")
    assert [len(store.add_runs([pair], same_provenance=("log_sha256", "log_result_index"))) for pair in pairs] == [1, 1]
    again = import_log(LOGS / "nccl-tests/xxrjun_alltoall_sendrecv_2node.log", system="cluster00")
    assert store.add_runs(again, same_provenance=("log_sha256", "log_result_index")) == []
    local = [({**run, "id": f"{run['id']}-{n}", "origin": "local", "provenance": {}}, rows)
             for n, (run, rows) in enumerate(again)]  # no log_sha256: never the same log as another run
    assert len(store.add_runs(local, same_provenance=("log_sha256", "log_result_index"))) == 2


# --------------------------------------------------------------------- two sites, two machines (issue 17)
SMOKE = "localhost_scaling_smoke"
#: What site A's machine is said to be in its bundle: the test signs the bundle itself (dlrun has no switch to
#: fake the machine it runs on), so that two homes on this one machine are two machines.
ELSEWHERE = {"cpu": "AMD EPYC 9B45", "sockets": 2, "cores_per_socket": 64, "memory_gib": 1536}


def _with_machine(bundle: Path, out: Path, key: Path, machine: dict) -> Path:
    """`bundle` with every run's fingerprint changed to `machine`, its manifest updated and signed again."""
    def change(items):
        named = {info.name: (info, data) for info, data in items}
        runs = [json.loads(line) for line in named["runs.jsonl"][1].splitlines()]
        for run in runs:
            run["fingerprint"] = {**run["fingerprint"], **machine}
        data = "".join(json.dumps(run, sort_keys=True, separators=(",", ":")) + "\n" for run in runs).encode()
        manifest = json.loads(named["manifest.json"][1])
        manifest["files"]["runs.jsonl"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        text = json.dumps(manifest, indent=1, sort_keys=True).encode()
        signed = out.parent / "manifest.json"
        signed.parent.mkdir(parents=True, exist_ok=True)
        signed.write_bytes(text)
        subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", "dlrun-bundle", str(signed)], check=True)
        replaced = {"manifest.json": text, "manifest.json.sig": Path(f"{signed}.sig").read_bytes(), "runs.jsonl": data}
        return [(info, replaced.get(info.name, data_)) for info, data_ in items]
    return rebuild(bundle, out, change)


@pytest.mark.mpi
def test_another_sites_runs_on_another_machine_are_compared_never_counted(tmp_path):
    keys = tmp_path / "keys"
    alice = make_key(keys, "alice")
    allowed = allowed_signers(keys / "allowed", {"ops@a.example.org": alice})
    a = {"DLRUN_HOME": str(tmp_path / "a"), "XDG_CONFIG_HOME": str(tmp_path / "a-config"), "DLRUN_SITE": "a.example.org"}
    b = {"DLRUN_HOME": str(tmp_path / "b"), "XDG_CONFIG_HOME": str(tmp_path / "b-config"), "DLRUN_SITE": "b.example.org",
         "COLUMNS": "250"}
    run_cli("reproduce", SMOKE, "--repeats", "1", env=a, check=True, timeout=900)
    exported = tmp_path / "a.bundle"
    run_cli("results", "export", "--experiment", SMOKE, "--out", str(exported), "--sign", str(alice), env=a, check=True)
    bundle = _with_machine(exported, tmp_path / "forged" / "a.bundle", alice, ELSEWHERE)
    run_cli("results", "import", str(bundle), "--allowed-signers", str(allowed), env=b, check=True)
    imported = _runs(b)
    assert len(imported) == 2 and {r["site"] for r in imported} == {"a.example.org"}

    dry = json.loads(run_cli("reproduce", SMOKE, "--repeats", "1", "--dry-run", "--json", env=b, check=True).stdout)
    points = [p for system in dry["systems"] for p in system["points"]]
    assert len(points) == 2 and all(p["stored"] == 0 and p["missing"] == 1 for p in points)  # every point to run

    run_cli("reproduce", SMOKE, "--repeats", "1", env=b, check=True, timeout=900)
    refused = run_cli("compare", "--experiment", SMOKE, "--by", "devices", env=b)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    named = {line.strip().split(":")[0] for line in refused.stderr.splitlines()[1:-1]}
    assert {"site", "cpu", "cores (sockets x cores)", "memory (GiB)"} <= named, refused.stderr
    assert "  site: a.example.org (2 runs) ≠ b.example.org (2 runs)" in refused.stderr
    by_site = json.loads(run_cli("compare", "--experiment", SMOKE, "--by", "site", "--baseline", "b.example.org",
                                 "--json", env=b, check=True).stdout)
    assert by_site["like_for_like"] and {r["site"] for r in by_site["rows"]} == {"a.example.org"}
    assert sorted(r["devices"] for r in by_site["rows"]) == [1, 2] and by_site["sites"] == ["a.example.org",
                                                                                            "b.example.org"]


def test_an_imported_log_says_which_machine_it_came_from(dlrun_home, tmp_path):
    log = LOGS / "horovod/issue712_pytorch_synthetic_4gpu.log"
    bare = json.loads(run_cli("results", "import-log", str(log), "--system", "box", "--json", check=True).stdout)
    [unknown] = bare["added"]
    assert Store(dlrun_home / "results.sqlite").get_run(unknown)["key"]["cpu"] == "unknown"
    copy = tmp_path / "again.log"
    copy.write_text(log.read_text() + "\n")  # another file: another import
    here = json.loads(run_cli("results", "import-log", str(copy), "--system", "box", "--machine", "here", "--json",
                              check=True).stdout)
    store = Store(dlrun_home / "results.sqlite")
    stored = store.get_run(here["added"][0])
    cpu = cpu_inventory()
    assert stored["fingerprint"]["cpu"] == short_cpu_name(cpu["model"]) and stored["site"] == local_site()
    third = tmp_path / "third.log"
    third.write_text(log.read_text() + "\n\n")
    copied = json.loads(run_cli("results", "import-log", str(third), "--system", "box", "--machine", stored["id"],
                                "--json", check=True).stdout)
    again = store.get_run(copied["added"][0])
    assert {k: again["key"][k] for k in ("site", "cpu", "cores", "memory_gib")} == \
        {k: stored["key"][k] for k in ("site", "cpu", "cores", "memory_gib")}
    assert "--machine 'nope': " in _error(run_cli("results", "import-log", str(log), "--system", "box", "--machine",
                                                  "nope"), 2)
    assert f"run {unknown} has no recorded machine" in _error(
        run_cli("results", "import-log", str(log), "--system", "box", "--machine", unknown), 2)


# ------------------------------------------------ a log imported as a run of a dlrun workload
KUBEFLOW = LOGS / "tf_cnn_benchmarks/mpioperator_horovod_2gpu_tf1.14.log"  # TF 1.14, Horovod, 2 x 64, ResNet-101
AS_RUN = ("--system", "txgaia", "--workload", "resnet101_v1", "--image", "tf1.14-nccl", "--precision", "fp32",
          "--nodes", "1")
#: A site's own experiment with the one point that log is a run of (the site's config, not a log).
EXPERIMENT = """id: site_resnet101_horovod
title: "ResNet-101 (v1) with Horovod on one TX-GAIA node"
document: {name: "kubeflow/mpi-operator README", title: "the MPI operator's TensorFlow example", authors: "Kubeflow"}
where: "README, tensorflow-benchmarks example"
description: "tf_cnn_benchmarks ResNet-101 on the two GPUs of one node with Horovod, 64 images per GPU."
measure: training
systems: [txgaia]
axes:
  - name: model
    values: [{paper: ResNet-101, dlrun: resnet101_v1}]
  - name: gpus
    values: [2]
run: {steps: 100, warmup_steps: 10, repeats: 3, why: "tf_cnn_benchmarks' default of 100 timed batches"}
settings:
  - {batch_per_device: 64, why: "the example's batch"}
status: {kind: runnable}
"""


@pytest.fixture
def locked(dlrun_home):
    """This site's lock records a digest for tf1.14-nccl, as `dlrun images build` would."""
    from dlrun.images import lock

    lock.record("tf1.14-nccl", "x86_64", digest="sha256:" + "5e" * 32)
    return dlrun_home


def _dlrun_run_of_the_same_plan(value: float) -> str:
    """Store the record the executor stores for `dlrun run resnet101_v1 --system txgaia --image tf1.14-nccl
    --nodes 1 --ranks-per-node 2 --batch-size 64` whose job printed the kubeflow log with `value` as its
    total; returns its id."""
    from dlrun.cli.options import load_catalog
    from dlrun.execute.record import run_row
    from dlrun.images.verify import with_local_image
    from dlrun.paths import store_path
    from dlrun.plan import resolve_plan
    from dlrun.results.parsers import parse_text

    plan = resolve_plan(load_catalog(), "resnet101_v1", image="tf1.14-nccl", system="txgaia", nodes=1,
                        ranks_per_node=2, batch_size=64, local_image=with_local_image)
    result = {**parse_text(KUBEFLOW.read_text()).to_dict(), "value": value}
    record = run_row(plan.summary(), run_id="20260101-000000-d1a2b3", run_dir=Path("/nonexistent"), status="ok",
                     started=0, finished=1, provenance={})
    Store(store_path()).add_run(record, [result])
    return record["id"]


def test_an_imported_log_with_its_workload_is_compared_with_dlrun_runs(locked):
    imported = json.loads(run_cli("results", "import-log", str(KUBEFLOW), *AS_RUN, "--json", check=True).stdout)
    [run_id] = imported["added"]
    local = _dlrun_run_of_the_same_plan(300.0)
    shown = json.loads(run_cli("results", "show", run_id, "--json", check=True).stdout)
    assert (shown["workload"], shown["image"], shown["world_size"], shown["batch_size"], shown["origin"]) == \
        ("resnet101_v1", "tf1.14-nccl", 2, 64, "import-log")
    assert shown["key"] == json.loads(run_cli("results", "show", local, "--json", check=True).stdout)["key"]
    assert re.fullmatch(r"the `total images/sec` line \(line \d+\)", shown["results"][0]["value_is"])
    assert "total images/sec" in run_cli("results", "show", run_id, check=True).stdout  # `throughput is` row
    compared = json.loads(run_cli("compare", "--workload", "resnet101_v1", "--json", check=True).stdout)
    assert compared["like_for_like"] and compared["differences"] == []
    [row] = compared["rows"]
    assert row["n"] == 2 and sorted(row["runs"]) == sorted([run_id, local])


def test_an_imported_log_tagged_with_an_experiment_counts_for_its_point(locked, tmp_path):
    experiments = Path(os.environ["XDG_CONFIG_HOME"]) / "dlrun" / "experiments"
    experiments.mkdir(parents=True)
    (experiments / "site_resnet101_horovod.yaml").write_text(EXPERIMENT)
    out = json.loads(run_cli("results", "import-log", str(KUBEFLOW), *AS_RUN, "--experiment",
                             "site_resnet101_horovod", "--json", check=True).stdout)
    assert [(r["experiment"], r["point"]) for r in out["runs"]] == [("site_resnet101_horovod", "model=ResNet-101 gpus=2")]
    plan = json.loads(run_cli("reproduce", "site_resnet101_horovod", "--system", "txgaia", "--dry-run", "--json",
                              check=True).stdout)
    [point] = plan["systems"][0]["points"]
    assert (point["stored"], point["missing"]) == (1, 2)
    # told it ran in amp, the same log is no point of it (the experiment plans fp32): refused, naming the
    # points there are, and nothing is stored
    refused = _error(run_cli("results", "import-log", str(KUBEFLOW), *AS_RUN[:6], "--precision", "amp", "--nodes",
                             "1", "--experiment", "site_resnet101_horovod"), 2)
    assert ("the log (resnet101_v1, image tf1.14-nccl, 1 x 2 ranks, batch 64, amp, opa) is no point of experiment "
            "site_resnet101_horovod on system 'txgaia'; valid: model=ResNet-101 gpus=2 (resnet101_v1, image "
            "tf1.14-nccl, 1 x 2 ranks, batch 64, fp32, opa)") in refused
    assert len(_runs({})) == 1


@pytest.mark.parametrize("args,message", [
    (("--workload", "resnt50"), "unknown workload 'resnt50'; did you mean 'resnet50'?"),
    (("--precision", "amp"), "--precision says how the log's run was made, as a run of a dlrun workload; name the "
                             "workload with --workload NAME or --model NAME"),
    (("--experiment", "site_x"), "--experiment site_x counts the log for one of its points; name the workload"),
    (("--workload", "resnet50_v1"), "the log trained resnet101 (tf_cnn_benchmarks' name), but workload "
                                    "'resnet50_v1' trains resnet50; valid: --workload resnet101_v1"),
    (("--workload", "nccl_all_reduce_perf"), "workload 'nccl_all_reduce_perf' (nccl-tests: all_reduce_perf) is not "
                                             "what the log measured, a training throughput (tf_cnn_benchmarks)"),
    (("--model", "resnet50_v1.5"), "--model resnet50_v1.5 is trained by workloads resnet50, resnet50_v1.5; valid: "
                                   "--workload resnet50 or --workload resnet50_v1.5"),
    (("--workload", "resnet101_v1"), "the log does not say which image it ran in; valid: --image NAME"),
    (("--workload", "resnet101_v1", "--image", "pytorch2.6-ngc24.12"),
     "the log is tf_cnn_benchmarks output, but image 'pytorch2.6-ngc24.12' runs dlrun's harness; valid: "
     "--image tf1.14-nccl or --image tf1.8-cuda9"),
    (("--workload", "resnet101_v1", "--image", "tf1.8-cuda9"),
     "the log ran tensorflow 1.14, but image 'tf1.8-cuda9' pins 1.8.0"),
    (("--workload", "resnet101_v1", "--image", "tf1.14-nccl", "--nodes", "1"),
     "the log does not say its precision; valid: --precision fp32 or amp"),
    (("--workload", "resnet101_v1", "--image", "tf1.14-nccl", "--precision", "fp8"),
     "unknown --precision 'fp8'; did you mean 'fp32'? valid: amp, bf16, fp16, fp32, tf32"),
    (("--workload", "resnet101_v1", "--image", "tf1.14-nccl", "--precision", "fp32"),
     "the log does not say how many nodes its 2 devices sat on; valid: --nodes N with N dividing 2"),
    (AS_RUN[2:] + ("--batch-size", "32"), "--batch-size 32 disagrees with the log, whose batch per device is 64; "
                                          "valid: --batch-size 64, or leave it out"),
    (AS_RUN[2:-2] + ("--ranks-per-node", "0"), "--ranks-per-node must be a positive integer, got 0"),
    (AS_RUN[2:-2] + ("--nodes", "2"), "the log ran on 2 nodes, whose traffic crossed a fabric it does not name; "
                                      "valid: --fabric opa or --fabric roce"),
    (AS_RUN[2:] + ("--fabric", "ib"), "--fabric ib is not a fabric of system 'txgaia'; valid: opa, roce"),
    (AS_RUN[2:] + ("--experiment", "E001_mixed_precision_resnet50"),
     "system 'txgaia' is not a system of experiment E001_mixed_precision_resnet50"),
])
def test_import_log_options_are_checked_like_dlrun_runs(dlrun_home, args, message):
    system = () if "--system" in args else ("--system", "txgaia")
    assert message in _error(run_cli("results", "import-log", str(KUBEFLOW), *system, *args), 2)
    assert _runs({}) == []


def test_a_log_of_other_code_is_never_counted_for_a_point_dlrun_runs(dlrun_home):
    # DeepLearningExamples' ResNet-50 on 8 GPUs in amp at 128 per GPU is planned like this DGX-2 point of
    # Ren et al.'s experiment, but its code (and its ImageNet input) is not what the point runs.
    refused = _error(run_cli("results", "import-log", str(LOGS / "dllogger/perfreport_pytorch_rn50_8gpu_amp_stdout.log"),
                             "--system", "dgx2", "--workload", "resnet50", "--image", "pytorch1.0-nvcr18.11", "--nodes",
                             "1", "--experiment", "E001_mixed_precision_resnet50"), 2)
    assert ("the log is no run of point model=ResNet50 gpus=8 precision=FP16 batch_per_device=128 data_workers=4 of "
            "experiment E001_mixed_precision_resnet50: data: synthetic planned, real:imagenet in the log; ") in refused
    assert "framework: pytorch planned, pytorch/deeplearningexamples in the log" in refused
    assert _runs({}) == []
