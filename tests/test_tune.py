"""Defaults chosen by measurement per machine (dlrun.tune): the harness's trial and knob records, the decision
rule, the decisions stored per machine fingerprint (reused, measured again when the fingerprint changes), the
comparability key untouched by tuning, and a CPU without bfloat16 instructions saying what an amp run ran."""
from __future__ import annotations

import json
import math
import os

import pytest

from conftest import run_cli

from dlrun.harness import load_harness
from dlrun.harness.harness_contract import code_path

knobs_mod = load_harness("pytorch", "knobs")
tune_mod = load_harness("pytorch", "tune")
entry = load_harness("pytorch")

#: Tuning is on for these tests (conftest turns it off for the others), and the loaded test machine must not
#: mark decisions as taken on a busy machine (they would be measured again once it is quiet).
TUNE_ENV = {"DLRUN_TUNE": "auto", "DLRUN_TUNE_BUSY_LOAD": "100000"}
SMALL = ["--batch-size", "2", "--steps", "2", "--warmup-steps", "1", "--telemetry", "off"]


# --- the harness: what a run records about its knobs, and pinning ------------------------------------------

def test_a_knob_is_asked_for_when_given_default_when_not_and_tuned_when_dlrun_says_so():
    values = {"allocator": "tcmalloc", "fused_optimizer": "off", "threads": 2}
    argv = ["--model", "trivial", "--fused-optimizer", "off", "--threads", "2"]
    record = knobs_mod.knob_record(values, argv, environ={})
    assert record == {"allocator": {"value": "tcmalloc", "source": "default"},
                      "fused_optimizer": {"value": "off", "source": "asked for"},
                      "threads": {"value": 2, "source": "asked for"}}
    env = {"DLRUN_KNOB_SOURCES": "threads=default,fused_optimizer=tuned,allocator=asked,bogus=tuned,compile=x"}
    record = knobs_mod.knob_record(values, argv, environ=env)
    assert [record[k]["source"] for k in ("allocator", "fused_optimizer", "threads")] == [
        "asked for", "tuned", "default"]


def test_pinning_gives_each_local_rank_its_own_cpus_and_keeps_the_users_settings():
    assert knobs_mod.rank_cpus([0, 1, 2, 3], 2, 0) == [0, 1]
    assert knobs_mod.rank_cpus([3, 2, 1, 0], 2, 1) == [2, 3]
    assert knobs_mod.rank_cpus([0, 1], 2, 1) == [0, 1]  # more threads than CPUs: wraps round
    env = {"OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    knobs_mod.pin_threads(["--pin-threads", "on", "--threads", "2"], env, affinity=lambda pid: {0, 1, 2, 3})
    assert (env["OMP_PROC_BIND"], env["OMP_PLACES"]) == ("close", "{2},{3}")
    mine = {"OMP_PLACES": "cores"}
    knobs_mod.pin_threads(["--pin-threads", "on"], mine, affinity=lambda pid: {0, 1})
    assert mine == {"OMP_PLACES": "cores"}
    nothing = {}
    knobs_mod.pin_threads(["--pin-threads", "auto"], nothing, affinity=lambda pid: {0, 1})
    assert nothing == {}


def test_a_training_result_records_every_knob_with_its_source(capsys, monkeypatch):
    monkeypatch.setenv("DLRUN_KNOB_SOURCES", "threads=default,channels_last=tuned")
    code = entry.main(["--model", "trivial", "--batch-size", "2", "--steps", "1", "--warmup-steps", "1",
                       "--threads", "1", "--fused-optimizer", "off", "--channels-last", "off"])
    out = capsys.readouterr().out
    assert code == 0
    result = json.loads(out.split("DLRUN_RESULT ", 1)[1].splitlines()[0])
    knobs = result["knobs"]
    assert set(knobs) == set(knobs_mod.KNOBS)
    assert knobs["fused_optimizer"] == {"value": "off", "source": "asked for"}
    assert knobs["channels_last"] == {"value": "off", "source": "tuned"}
    assert knobs["threads"] == {"value": 1, "source": "default"}
    assert knobs["compile"] == {"value": "off", "source": "default"}
    assert knobs["cudnn_benchmark"]["value"] == "n/a" and result["warmup_time_s"] > 0


def test_the_trial_varies_only_what_applies_reference_first():
    defaults = {"fused_optimizer": "on", "channels_last": "n/a", "threads": 4, "compile": "off",
                "cudnn_benchmark": "n/a"}
    spec = {"grid": {"fused_optimizer": ["on", "off"], "channels_last": ["on", "off"]},
            "extras": [{"threads": 2}, {"cudnn_benchmark": "off"}]}
    points = tune_mod.variant_knobs(spec, defaults)
    assert points == [defaults, {**defaults, "fused_optimizer": "off"}, {**defaults, "threads": 2}]


def test_a_trial_times_every_variant_in_every_round(capsys, monkeypatch):
    monkeypatch.setenv("DLRUN_TUNE_TRIAL", json.dumps({  # base: the fused step, whatever this CPU's default
        "base": {"fused_optimizer": "on"}, "grid": {"fused_optimizer": ["on", "off"]}, "extras": [{"threads": 1}],
        "rounds": 3, "warmup": 1}))
    code = entry.main(["--model", "trivial", "--batch-size", "2", "--threads", "2", "--device", "cpu"])
    out = capsys.readouterr().out
    assert code == 0
    record = json.loads(out.split("DLRUN_TUNE ", 1)[1].splitlines()[0])
    assert record["rounds"] == 3 and len(record["variants"]) == 3
    assert [v["knobs"]["fused_optimizer"] for v in record["variants"]] == ["on", "off", "on"]
    assert [v["knobs"]["threads"] for v in record["variants"]] == [2, 2, 1]
    assert [v["fused"] for v in record["variants"]] == [True, False, True]
    for v in record["variants"]:
        assert len(v["step_s"]) == 3 and all(t > 0 for t in v["step_s"]) and len(v["warmup_s"]) == 1


# --- the decision rule ---------------------------------------------------------------------------------------

def _record(steps: dict[str, list[float]], ran: dict[str, bool] | None = None, base: dict | None = None) -> dict:
    base = base or {"fused_optimizer": "off", "channels_last": "on", "threads": 2}
    variants = []
    for label, times in steps.items():
        knobs = dict(base)
        for part in filter(None, label.split(",")):
            name, value = part.split("=")
            knobs[name] = int(value) if name == "threads" else value
        fused = knobs["fused_optimizer"] == "on"
        variants.append({"knobs": knobs, "step_s": times, "fused": (ran or {}).get(label, fused), "compiled": False})
    return {"variants": variants}


def test_a_knob_keeps_a_value_off_its_reference_only_where_its_interval_shows_a_win():
    from dlrun.tune.search import choose

    knobs = ["fused_optimizer", "channels_last", "threads"]
    # five alternated rounds (seconds per step): NHWC wins every round; the fused step and one thread are
    # faster on average but up and down round to round (a bimodal machine), so their intervals reach below 1
    record = _record({"": [1.0, 1.02, 0.98, 1.0, 1.01],
                      "fused_optimizer=on": [0.95, 1.06, 0.92, 1.03, 0.96],
                      "channels_last=off": [1.3, 1.25, 1.28, 1.3, 1.27],
                      "fused_optimizer=on,channels_last=off": [1.31, 1.26, 1.3, 1.29, 1.3],
                      "threads=1": [0.8, 1.1, 0.78, 1.12, 0.8]})
    chosen, gain = choose(record, knobs)
    assert chosen == {"fused_optimizer": "off", "channels_last": "on", "threads": 2}
    assert gain["channels_last"] == pytest.approx(1.27, abs=0.02) and gain["threads"] == 1.0
    # the same trial where the fused step wins every round by 5 %: kept, over the reference
    record["variants"][1]["step_s"] = [0.95, 0.97, 0.93, 0.95, 0.96]
    chosen, _ = choose(record, knobs)
    assert chosen["fused_optimizer"] == "on" and chosen["channels_last"] == "on"


def test_a_default_off_its_reference_goes_back_to_it_when_the_trial_does_not_show_it_winning():
    from dlrun.tune.search import choose

    # the default here is NHWC (measured to win on some processor kind), but this trial cannot tell them apart
    record = _record({"": [1.0, 1.1, 0.9, 1.05], "channels_last=off": [1.02, 0.95, 1.06, 0.97]})
    assert choose(record, ["channels_last"])[0] == {"channels_last": "off"}
    # two rounds are too few for an interval, however large the gain: the reference stays
    record = _record({"": [1.0, 1.0], "channels_last=off": [2.0, 2.0]})
    assert choose(record, ["channels_last"])[0] == {"channels_last": "off"}
    # the fused batch norm + ReLU measured both ways: on only where the interval says so
    base = {"fused_optimizer": "off", "channels_last": "on", "fused_bn_relu": "off", "threads": 2}
    record = _record({"": [1.0, 1.01, 1.0, 0.99], "fused_bn_relu=on": [0.97, 0.98, 0.975, 0.965]}, base=base)
    assert choose(record, ["fused_bn_relu"])[0] == {"fused_bn_relu": "on"}


def test_a_variant_that_did_not_run_as_asked_is_never_chosen():
    from dlrun.tune.search import choose, speedups

    record = _record({"": [1.0, 1.0, 1.0], "fused_optimizer=off": [0.5, 0.5, 0.5]}, ran={"": False},
                     base={"fused_optimizer": "on", "channels_last": "on", "threads": 2})
    assert math.isnan(speedups(record)[0])  # asked fused, ran the default step
    record = _record({"fused_optimizer=off": [1.0, 1.0, 1.0], "fused_optimizer=on": [0.5, 0.5, 0.5]},
                     ran={"fused_optimizer=on": False})
    assert choose(record, ["fused_optimizer"])[0] == {"fused_optimizer": "off"}


def test_a_per_process_knob_must_beat_both_reference_processes():
    from dlrun.tune.search import choose_per_process

    chosen, _ = choose_per_process([1.0, 0.8], {"allocator": {"jemalloc": 0.79}})
    assert chosen == {}  # faster than the slower reference only: the load moved, not the allocator
    chosen, gain = choose_per_process([1.0, 0.9], {"allocator": {"jemalloc": 0.8, "system": 1.2},
                                                   "pin_threads": {"on": 0.95}})
    assert chosen == {"allocator": "jemalloc"} and gain["allocator"] == pytest.approx(0.95 / 0.8)


# --- decisions stored per machine --------------------------------------------------------------------------

def test_decisions_are_stored_per_fingerprint_and_configuration_and_checked_when_read(dlrun_home):
    from dlrun.tune import decisions

    one = {"fingerprint_id": "a" * 16, "config_id": "c" * 16, "decided_at": "2026-01-01T00:00:00Z",
           "knobs": {"allocator": {"value": "jemalloc"}, "threads": {"value": 1},
                     "compile": {"value": "sideways"}, "nonsense": {"value": "on"}, "pin_threads": "on"}}
    decisions.save(one)
    decisions.save({**one, "fingerprint_id": "b" * 16, "knobs": {}})
    found = decisions.lookup("a" * 16, "c" * 16)
    assert found["knobs"] == {"allocator": {"value": "jemalloc"}, "threads": {"value": 1}}
    assert decisions.lookup("a" * 16, "d" * 16) is None and decisions.lookup("e" * 16, "c" * 16) is None
    decisions.save({**one, "decided_at": "2026-02-01T00:00:00Z", "knobs": {"threads": {"value": 2}}})
    assert decisions.lookup("a" * 16, "c" * 16)["knobs"] == {"threads": {"value": 2}}  # replaced, not added
    assert len(decisions.load()) == 2
    decisions.decisions_path().write_text("{not json")
    assert decisions.load() == [] and decisions.lookup("a" * 16, "c" * 16) is None
    decisions.decisions_path().write_text(" " * (decisions.MAX_BYTES + 1))
    assert decisions.load() == []


def test_the_fingerprint_changes_with_the_hardware_and_not_with_the_moment():
    from dlrun.preflight import node_inventory
    from dlrun.tune.machine_key import fingerprint_id, machine_fingerprint

    inventory = node_inventory()
    fp = machine_fingerprint(inventory)
    assert fp["isa"] and fp["cpu"] and fp["usable_cpus"] >= 1
    later = {**inventory, "collected_at": "2099-01-01T00:00:00Z", "collect_seconds": 9.9}
    assert fingerprint_id(machine_fingerprint(later)) == fingerprint_id(fp)
    other_cpu = {**inventory, "cpu": {**inventory["cpu"], "isa_flags": ["avx2", "fma"]}}
    assert fingerprint_id(machine_fingerprint(other_cpu)) != fingerprint_id(fp)


def _tuning(home) -> list[dict]:
    path = home / "tuning.json"
    return json.loads(path.read_text())["decisions"] if path.exists() else []


def _stored(run_id: str, env: dict) -> dict:
    proc = run_cli("results", "show", run_id, "--json", env=env, check=True)
    return json.loads(proc.stdout)


def _run_id(stdout: str) -> str:
    return next(line.split("run ", 1)[1].split(":", 1)[0] for line in stdout.splitlines()
                if line.strip().startswith("run ") and ": ok" in line)


@pytest.mark.slow
def test_dlrun_tune_stores_a_decision_that_runs_reuse_and_the_key_names_the_code_it_chose(dlrun_home):
    env = {**TUNE_ENV, "DLRUN_HOME": str(dlrun_home)}
    proc = run_cli("tune", "trivial", "--batch-size", "2", "--knobs", "fused_optimizer,channels_last",
                   "--rounds", "2", env=env)
    assert proc.returncode == 0, proc.stderr
    (decision,) = _tuning(dlrun_home)
    assert set(decision["knobs"]) == {"fused_optimizer", "channels_last"}
    assert decision["fingerprint"]["isa"] and decision["config"]["batch_size"] == 2
    assert decision["trial_batch"] == 2 and {t["batch_size"] for t in decision["trials"]} == {2}
    moved = [sorted(k for k in ("fused_optimizer", "channels_last") if v["knobs"][k] != ref[k])
             for t in decision["trials"] for ref in [t["variants"][0]["knobs"]] for v in t["variants"]]
    assert ["channels_last", "fused_optimizer"] in moved  # `dlrun tune` measures the combinations too
    assert "stored for machine " + decision["fingerprint_id"] in proc.stdout

    tuned = run_cli("run", "trivial", *SMALL, env=env)
    assert tuned.returncode == 0, tuned.stderr
    assert "measuring" not in tuned.stderr  # the stored decision, reused
    assert _tuning(dlrun_home) == [decision]
    run = _stored(_run_id(tuned.stdout), env)
    plan, extra = run["plan"], run["results"][0]["extra"]
    assert plan["knob_sources"]["fused_optimizer"] == "tuned" and plan["tuning"]["decided_at"] == decision["decided_at"]
    assert extra["knobs"]["fused_optimizer"] == {"value": decision["knobs"]["fused_optimizer"]["value"],
                                                 "source": "tuned"}
    assert extra["knobs"]["threads"]["source"] == "default" and extra["knobs"]["allocator"]["source"] == "default"
    assert "(tuned)" in tuned.stdout

    untuned = run_cli("run", "trivial", *SMALL, "--tune", "off", env=env)
    assert untuned.returncode == 0, untuned.stderr
    plain = _stored(_run_id(untuned.stdout), env)
    assert plain["results"][0]["extra"]["knobs"]["fused_optimizer"]["source"] == "default"
    # the key's code path is the code the knobs chose, whoever chose them: alike where the tuner kept the
    # defaults' code, never pooled where it did not; nothing else of the key differs
    ran = [code_path(r["results"][0]["extra"]["knobs"]) for r in (run, plain)]
    assert (run["key"]["code_path"], plain["key"]["code_path"]) == tuple(ran)
    assert (plain["key"] == run["key"]) == (ran[0] == ran[1])
    assert {k: v for k, v in plain["key"].items() if k != "code_path"} == \
        {k: v for k, v in run["key"].items() if k != "code_path"}

    pinned = run_cli("run", "trivial", *SMALL, "--tune", "off", "--fused-optimizer", "off", "--allocator",
                     "system", env=env)
    assert pinned.returncode == 0, pinned.stderr
    key = _stored(_run_id(pinned.stdout), env)["key"]
    assert key["framework"] == run["key"]["framework"] + " pinned: allocator=system"  # the user's placement
    assert "fused_optimizer" not in key["code_path"]  # off is the reference: a code-path knob is its code path
    assert {k: v for k, v in key.items() if k not in ("framework", "code_path")} == \
        {k: v for k, v in run["key"].items() if k not in ("framework", "code_path")}


@pytest.mark.slow
def test_a_first_run_tunes_a_new_fingerprint_is_measured_again_and_asked_knobs_stay(dlrun_home, monkeypatch):
    env = {**TUNE_ENV, "DLRUN_HOME": str(dlrun_home), "DLRUN_TUNE_BUDGET_S": "5"}
    first = run_cli("run", "trivial", *SMALL, "--fused-optimizer", "off", env=env)
    assert first.returncode == 0, first.stderr
    assert "first run of this configuration on this machine" in first.stderr
    (decision,) = _tuning(dlrun_home)
    assert "fused_optimizer" not in decision["knobs"]
    assert decision["not_measured"]["fused_optimizer"] == "asked for: not tuned"
    assert {"channels_last", "threads"} <= set(decision["knobs"])
    extra = _stored(_run_id(first.stdout), env)["results"][0]["extra"]
    assert extra["knobs"]["fused_optimizer"] == {"value": "off", "source": "asked for"}
    assert extra["knobs"]["channels_last"]["source"] == "tuned"

    # the same configuration on other hardware (a CPU with other vector extensions): measured again
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from dlrun.cli.options import load_catalog
    from dlrun.plan import SiteInputs, resolve_plan
    from dlrun.preflight import node_inventory
    from dlrun.tune import knob_decision

    inventory = node_inventory()
    other = {**inventory, "cpu": {**inventory["cpu"], "model": "Another CPU", "isa_flags": ["avx2", "fma"]}}
    lines: list[str] = []

    def tuned():  # resolve_plan finishes the plan with the machine's decision, measured where there is none
        return resolve_plan(load_catalog(), "trivial", batch_size=2, steps=2, warmup_steps=1, telemetry="off",
                            fused_optimizer="off", tune="auto",
                            site=SiteInputs(knob_decision=knob_decision(other, log=lines.append)))
    applied = tuned()
    assert any("first run of this configuration" in line for line in lines)
    assert len({d["fingerprint_id"] for d in _tuning(dlrun_home)}) == 2
    assert applied.knob_sources["channels_last"] == "tuned" and applied.fused_optimizer == "off"
    lines.clear()
    assert tuned() == applied and lines == []  # now stored: reused


@pytest.mark.slow
def test_the_automatic_tune_times_a_large_cpu_batch_at_16_and_moves_one_knob_at_a_time(dlrun_home):
    env = {**TUNE_ENV, "DLRUN_HOME": str(dlrun_home), "DLRUN_TUNE_BUDGET_S": "5"}
    proc = run_cli("run", "trivial", "--batch-size", "32", *SMALL[2:], env=env)
    assert proc.returncode == 0, proc.stderr
    (decision,) = _tuning(dlrun_home)
    assert decision["config"]["batch_size"] == 32 and decision["trial_batch"] == 16
    (trial,) = decision["trials"]
    assert trial["batch_size"] == 16  # what the harness itself ran, from its record
    ref = trial["variants"][0]["knobs"]
    moved = [[k for k in ref if v["knobs"][k] != ref[k]] for v in trial["variants"][1:]]
    assert sorted(map(tuple, moved)) == [("channels_last",), ("fused_optimizer",), ("threads",)]
    run = _stored(_run_id(proc.stdout), env)
    assert run["plan"]["batch_size"] == 32  # the run itself keeps its batch
    assert run["results"][0]["extra"]["knobs"]["channels_last"]["source"] == "tuned"


def test_amp_on_a_cpu_without_bf16_instructions_says_what_it_ran(dlrun_home, tmp_path):
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse avx2 fma avx512f\n")
    load = load_harness("pytorch", "common")
    assert load.cpu_has_native_bf16(str(fake)) is False
    proc = run_cli("run", "trivial", *SMALL, "--precision", "amp", "--env", f"DLRUN_HARNESS_TEST_CPUINFO={fake}",
                   env={"DLRUN_HOME": str(dlrun_home)})
    assert proc.returncode == 0, proc.stderr
    assert "amp: ran bf16 (emulated: this CPU has no bfloat16 instructions" in " ".join(proc.stdout.split())
    extra = _stored(_run_id(proc.stdout), {"DLRUN_HOME": str(dlrun_home)})["results"][0]["extra"]
    assert (extra["precision"], extra["precision_ran"], extra["native_bf16"]) == ("amp", "bf16", False)


@pytest.mark.parametrize("env,message", [
    ({"DLRUN_TUNE": "sometimes"}, "bad $DLRUN_TUNE 'sometimes'; valid: auto, off"),
    ({"DLRUN_TUNE": "auto", "DLRUN_TUNE_BUDGET_S": "soon"}, "bad $DLRUN_TUNE_BUDGET_S 'soon'; valid: seconds"),
])
def test_bad_tuning_settings_are_one_line(dlrun_home, env, message):
    proc = run_cli("run", "trivial", *SMALL, env={**env, "DLRUN_HOME": str(dlrun_home)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"dlrun: error: {message}"] or (
        len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr)
    assert not (dlrun_home / "tuning.json").exists()


def test_dlrun_tune_refuses_what_it_cannot_measure(dlrun_home):
    env = {"DLRUN_HOME": str(dlrun_home)}
    for argv, message in ((["trivial", "--knobs", "speed"], "unknown knob 'speed'"),
                          (["allreduce", "--ranks-per-node", "2"], "has no knobs to tune"),
                          (["resnet50", "--system", "txgaia", "--image", "pytorch2.6-ngc24.12"],
                           "dlrun tune measures this machine"),
                          (["resnet50", "--system", "dgx2"], "GPU")):
        proc = run_cli("tune", *argv, env=env)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr
    assert not (dlrun_home / "tuning.json").exists()
    assert os.environ.get("DLRUN_TUNE") == "off"  # conftest: other tests never tune


def test_a_tune_killed_in_a_trial_leaves_no_trial_folder(dlrun_home):
    """SIGKILL of `dlrun tune` while a trial runs (issue 36): the trial folder's lock, held by dlrun and by the
    trial process it inherited, goes with them, and the next dlrun command removes the folder."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, **TUNE_ENV, "DLRUN_HOME": str(dlrun_home)}
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "tune", "trivial", "--batch-size", "2", "--rounds",
                             "200"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    trials = dlrun_home / "tune-trials"
    deadline = time.monotonic() + 300
    while not list(trials.glob("trial-*/run.sh")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None and list(trials.glob("trial-*/run.sh")), "no trial started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    [folder] = list(trials.glob("trial-*"))
    while time.monotonic() < deadline:  # the trial ends on its parent-death signal; its lock goes with it
        listed = run_cli("results", "list", env={"DLRUN_HOME": str(dlrun_home)})
        assert listed.returncode == 0, listed.stderr
        if not folder.exists():
            break
        time.sleep(0.5)
    assert not folder.exists() and list(trials.glob("trial-*")) == []
