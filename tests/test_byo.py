"""Bring-your-own workloads (`kind: command`): a site catalog's own programs run through `dlrun run` (real
processes, real mpirun, the real Slurm test cluster), their results read by DLRUN_RESULT, a named parser or a
regex figure of merit, stored, compared (a latency is better lower) and reported like built-in workloads.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from fixtures_slurm import CLUSTER_SYSTEM

from dlrun.catalog.commands import PARSER_FORMATS, CommandResult
from dlrun.catalog.loader import CatalogError, load_file
from dlrun.catalog.models import WorkloadSpec
from dlrun.results.parsers import FORMATS
from dlrun.results.parsers.figure_of_merit import parse_figure
from dlrun.results.parsers.result import METRICS, UNITS, ParseError
from dlrun.results.compare.stats import change_sentence, ratio

# A user's own training script: every rank works, rank 0 prints the result line (as dlrun's harness does),
# and it writes what it was given so that the test can check the plan's variables reached each rank.
TRAIN_SCRIPT = """\
import json, os, sys, time
rank, world = int(os.environ["DLRUN_RANK"]), int(os.environ["DLRUN_WORLD_SIZE"])
batch, steps = int(os.environ["DLRUN_BATCH_SIZE"]), int(os.environ["DLRUN_STEPS"])
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as out:
    json.dump({k: v for k, v in os.environ.items() if k.startswith("DLRUN_") and k != "DLRUN_PATH"}, out)
start = time.perf_counter()
for _ in range(steps):
    sum(i * i for i in range(20000))
elapsed = time.perf_counter() - start
if rank == 0:
    print("DLRUN_RESULT " + json.dumps({"metric": "throughput", "unit": "samples/sec", "world_size": world,
          "value": world * batch * steps / elapsed, "batch_size_per_rank": batch,
          "value_is": "samples per second over all ranks, timed steps"}))
"""
# An OSU-style ping-pong: prints a latency per message size like osu_latency; the regex takes the 8-byte row.
PINGPONG = 'echo "# Size Latency (us)"; echo "1 2.50"; echo "8 {latency}"'


def _site(tmp_path: Path, latency: str = "3.25") -> Path:
    site = tmp_path / "site"
    (site / "workloads").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    entries = [
        {"name": "my_train", "kind": "command", "description": "a site's own training script",
         "command": f"python3 {script} {tmp_path / 'out'}", "default_steps": 3,
         "result": {"format": "dlrun-result"}},
        {"name": "my_pingpong", "kind": "command", "description": "8-byte ping-pong latency, per node",
         "command": PINGPONG.format(latency=latency), "run_per": "node",
         "result": {"format": "regex", "regex": r"^8\s+([0-9.]+)$", "metric": "latency", "unit": "us",
                    "direction": "lower", "description": "latency of an 8-byte message"}},
    ]
    (site / "workloads" / "mine.yaml").write_text(json.dumps(entries))  # JSON is YAML
    return site


def test_contract_names_match_the_parsers_and_result_model():
    # every parser but nccl-tests' JSON, which nccl-tests writes to the file its -J names, never to the output
    assert {PARSER_FORMATS[name] for name in PARSER_FORMATS} == set(FORMATS) - {"nccl-tests-json"}
    assert set(PARSER_FORMATS) | {"regex"} == set(CommandResult.model_fields["format"].annotation.__args__)
    assert set(CommandResult.model_fields["unit"].annotation.__args__[0].__args__) == set(UNITS)
    assert set(CommandResult.model_fields["metric"].annotation.__args__[0].__args__) == set(METRICS)


@pytest.mark.parametrize("fields,message", [
    ({"result": {"format": "regex", "regex": "x ([0-9]+)", "metric": "latency", "unit": "us",
                 "direction": "higher"}}, "latency is better when lower"),
    ({"result": {"format": "regex", "regex": "x [0-9]+", "metric": "latency", "unit": "us",
                 "direction": "lower"}}, "has 0 groups"),
    ({"result": {"format": "regex", "regex": "x ([0-9]+", "metric": "latency", "unit": "us",
                 "direction": "lower"}}, "does not compile"),
    ({"result": {"format": "regex", "regex": "x ([0-9]+)", "metric": "latency", "unit": "GB/s",
                 "direction": "lower"}}, "not measured in GB/s"),
    ({"result": {"format": "osu", "unit": "us"}}, "leave out unit"),
    ({"result": {"format": "awk"}}, "format"),
    ({}, "needs result"),
])
def test_bad_command_contracts_are_refused_with_the_valid_choice(tmp_path, fields, message):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps({"name": "w", "kind": "command", "description": "d", "command": "true", **fields}))
    with pytest.raises(CatalogError, match=re.escape(message)):
        load_file(WorkloadSpec, path)


def test_other_kinds_take_no_command(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps({"name": "w", "description": "d", "model": "resnet50", "command": "true"}))
    with pytest.raises(CatalogError, match="leave out command"):
        load_file(WorkloadSpec, path)


def test_figure_of_merit_takes_the_last_match_and_says_so():
    text = "[1,0]<stdout>:latency: 12.5 us\nnoise\n[1,0]<stdout>:latency: 3.25 us\n"
    result = parse_figure(text, r"latency: ([0-9.]+) us", metric="latency", unit="us")
    assert (result.value, result.unit, result.extra["direction"]) == (3.25, "us", "lower")
    assert "line 3" in result.value_is
    with pytest.raises(ParseError, match="no line matches"):
        parse_figure("nothing here\n", r"latency: ([0-9.]+)", metric="latency", unit="us")
    with pytest.raises(ParseError, match="not a number"):
        parse_figure("latency: 1.2.3\n", r"latency: ([0-9.]+)", metric="latency", unit="us")


def test_lower_is_better_turns_the_verdict_around():
    fast, slow = [2.0, 2.02, 1.98, 2.01], [4.0, 4.04, 3.96, 4.02]
    assert change_sentence(ratio(fast, slow)).startswith("faster by")
    assert change_sentence(ratio(fast, slow), better="lower").startswith("higher (worse) by")
    assert change_sentence(ratio(slow, fast), better="lower").startswith("lower (better) by")


def test_dry_run_shows_the_command_and_the_plan_variables(dlrun_home, tmp_path):
    env = {"DLRUN_PATH": str(_site(tmp_path))}
    proc = run_cli("run", "my_train", "--ranks-per-node", "2", "--launcher", "mpirun", "--batch-size", "3",
                   "--dry-run", env=env, check=True)
    assert f"python3 {tmp_path / 'train.py'}" in proc.stdout and "dlrun-command" in proc.stdout
    assert "DLRUN_WORLD_SIZE=2" in proc.stdout and "DLRUN_BATCH_SIZE=3" in proc.stdout
    shown = run_cli("workloads", "show", "my_pingpong", env=env, check=True).stdout
    assert "once per node" in shown and "latency in us, lower is better" in shown
    bad = run_cli("run", "my_train", "--dist", "horovod", "--dry-run", env=env)
    assert bad.returncode == 2 and "valid: no --dist" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_command_workloads_run_store_compare_and_report(dlrun_home, tmp_path):
    env = {"DLRUN_PATH": str(_site(tmp_path))}
    proc = run_cli("run", "my_train", "--ranks-per-node", "2", "--launcher", "mpirun", "--batch-size", "3",
                   env=env, check=True)
    assert "samples/sec" in proc.stdout
    seen = [json.loads((tmp_path / "out" / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [s["DLRUN_RANK"] for s in seen] == ["0", "1"]
    assert all(s["DLRUN_WORLD_SIZE"] == "2" and s["DLRUN_BATCH_SIZE"] == "3" and s["DLRUN_STEPS"] == "3"
               for s in seen)
    for _ in range(3):
        run_cli("run", "my_pingpong", env=env, check=True)
    runs = cli_json("results", "list", env=env)
    values = {(r["workload"], r["value"], r["unit"]) for r in runs}
    assert values >= {("my_pingpong", 3.25, "us")} and any(w == "my_train" and u == "samples/sec"
                                                          for w, _, u in values)
    train = cli_json("results", "show", next(r["id"] for r in runs if r["workload"] == "my_train"), env=env)
    assert train["status"] == "ok" and train["world_size"] == 2 and train["batch_size"] == 3
    assert train["results"][0]["num_devices"] == 2
    prov = train["provenance"]
    assert prov["command"].startswith("python3 ")
    assert list(prov["command_files_sha256"]) == [str(tmp_path / "train.py")]
    assert train["key"]["framework"] == "command" and train["key"]["model"].startswith("command ")
    ping = cli_json("results", "show", runs[0]["id"], env=env)["results"][0]
    assert ping["extra"]["direction"] == "lower" and ping["value_is"].startswith("latency of an 8-byte message")

    summary = cli_json("compare", "--workload", "my_pingpong", env=env)
    assert summary["like_for_like"] and summary["rows"][0]["n"] == 3 and summary["unit"] == "us"
    report = run_cli("report", "--workload", "my_pingpong", "--workload", "my_train", "--out",
                     str(tmp_path / "report"), env=env, check=True)
    assert "4 run(s)" in report.stdout or "4 run(s)" in report.stderr
    assert "my_pingpong" in (tmp_path / "report" / "index.html").read_text()


def test_compare_treats_a_latency_as_better_lower(dlrun_home, tmp_path):
    site = _site(tmp_path)
    env = {"DLRUN_PATH": str(site)}
    for batch in (4, 8):  # the batch is the axis; the command prints a latency that grows with it
        text = (site / "workloads" / "mine.yaml").read_text()
        data = json.loads(text)
        data[1]["command"] = PINGPONG.format(latency="$(( DLRUN_BATCH_SIZE / 2 )).0$(( RANDOM % 10 ))")
        (site / "workloads" / "mine.yaml").write_text(json.dumps(data))
        for _ in range(3):
            run_cli("run", "my_pingpong", "--batch-size", str(batch), env=env, check=True)
    rows = cli_json("compare", "--workload", "my_pingpong", "--by", "batch", env=env)["rows"]
    assert len(rows) == 1 and rows[0]["better"] == "lower" and rows[0]["ratio"] > 1.5
    assert rows[0]["verdict"].startswith("higher (worse) by")


def test_a_result_the_command_does_not_print_fails_the_run(dlrun_home, tmp_path):
    site = _site(tmp_path, latency="n/a")
    proc = run_cli("run", "my_pingpong", env={"DLRUN_PATH": str(site)})
    assert proc.returncode != 0
    run = cli_json("results", "list", env={"DLRUN_PATH": str(site)})[0]
    assert run["status"] == "failed"
    shown = cli_json("results", "show", run["id"], env={"DLRUN_PATH": str(site)})
    assert "no line matches" in shown["provenance"]["reason"]


@pytest.mark.slurm
def test_command_workloads_under_slurm(slurm_cluster, dlrun_home, tmp_path):
    """Both contracts through sbatch and srun on the two-node test cluster: the script on every rank, the
    per-node figure once per node."""
    site = _site(tmp_path)
    env = {**slurm_cluster.env, "DLRUN_PATH": os.pathsep.join([slurm_cluster.env["DLRUN_PATH"], str(site)])}
    for workload in ("my_train", "my_pingpong"):
        proc = run_cli("run", workload, "--system", CLUSTER_SYSTEM, "--nodes", "2", env=env, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = {r["workload"]: r for r in cli_json("results", "list", env=env)}
    assert runs["my_train"]["status"] == runs["my_pingpong"]["status"] == "ok"
    assert (runs["my_train"]["scheduler"], runs["my_train"]["world_size"]) == ("slurm", 2)
    assert (runs["my_pingpong"]["value"], runs["my_pingpong"]["unit"]) == (3.25, "us")
    assert {json.loads((tmp_path / "out" / f"rank{r}.json").read_text())["DLRUN_RANK"] for r in (0, 1)} == {"0", "1"}
    summary = cli_json("compare", "--workload", "my_train", env=env)
    assert summary["rows"][0]["n"] == 1 and summary["rows"][0]["devices"] == 2


def test_a_command_result_line_is_explained_in_its_own_words_not_the_harness_formula():
    """A site's script that prints DLRUN_RESULT without value_is: dlrun cannot know how it computed its value,
    so the result says the command's own words (its contract's description, its formula) or that it is the
    command's, never the harness's world_size*batch_size_per_rank*timed_steps/wall_time_s."""
    from dlrun.results.parsers.figure_of_merit import parse_command_output

    line = 'DLRUN_RESULT {"metric": "throughput", "unit": "samples/sec", "value": 12.5, "world_size": 2}\n'
    bare, _ = parse_command_output(CommandResult(format="dlrun-result"), [line])
    assert "world_size*batch_size_per_rank" not in bare.value_is and "slowest rank" not in bare.value_is
    assert bare.value_is.startswith("the command's own throughput in samples/sec") and "no value_is" in bare.value_is
    told, _ = parse_command_output(CommandResult(format="dlrun-result", description="our samples/s"),
                                   [line.replace('"world_size"', '"formula": "samples/elapsed", "world_size"')])
    assert told.value_is == "our samples/s: computed by it as samples/elapsed"
    own, _ = parse_command_output(CommandResult(format="dlrun-result"),
                                  [line.replace('"world_size"', '"value_is": "mine", "world_size"')])
    assert own.value_is == "mine"


def test_the_header_of_a_latency_command_names_no_batch_or_steps(dlrun_home, tmp_path):
    """A ping-pong trains nothing: its run's header says what it runs and reads, not "batch 16/rank, 5+20
    steps"; a site's training script keeps its batch and steps (its command sees them)."""
    env = {"DLRUN_PATH": str(_site(tmp_path))}
    ping = run_cli("run", "my_pingpong", env=env, check=True).stdout.splitlines()[0]
    assert "batch" not in ping and "steps" not in ping, ping
    assert "its command once per node, read as latency in us" in ping
    train = run_cli("run", "my_train", "--batch-size", "3", "--steps", "2", env=env, check=True).stdout.splitlines()[0]
    assert "batch 3/rank" in train and "+2 steps" in train, train
