"""A mini scaling experiment on this machine: `trivial` on 1 and 2 ranks (OpenMPI on localhost), 3 repeats
each, a measured matmul rate, then `dlrun compare --by devices`: the speedup/efficiency table with 95 %
confidence intervals (geometric means; Welch's t on the logs for the speedup), as the PRACE guide's Tables 8
and 9 lay it out."""
from __future__ import annotations

import json

import pytest
from conftest import cli_json, run_cli


@pytest.mark.mpi
@pytest.mark.slow
def test_scaling_table_from_real_runs(dlrun_home, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    for ranks in (1, 2):
        for _ in range(3):
            proc = run_cli("run", "trivial", "--ranks-per-node", str(ranks), "--steps", "2", "--warmup-steps", "1",
                           env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    measured = run_cli("measure", "matmul", "--precision", "fp32", "--size", "256", "--repeats", "3", "--json",
                       env=env, check=True)
    (matmul,) = json.loads(measured.stdout)
    assert matmul["unit"] == "GFLOP/s" and matmul["value"] > 0 and matmul["device"] == "cpu"

    data = cli_json("compare", "--workload", "trivial", "--by", "devices", env=env)
    assert data["mode"] == "scaling" and data["like_for_like"] and data["baseline"] == 1
    one, two = data["rows"]
    assert (one["devices"], one["n"], two["devices"], two["n"]) == (1, 3, 2, 3)
    for row in (one, two):
        assert 0 < row["ci_low"] < row["geomean"] < row["ci_high"] and row["stdev"] > 0
        assert row["min"] <= row["median"] <= row["max"]
    assert (one["speedup"], one["scaling_efficiency"]) == (1.0, 1.0)
    assert two["speedup"] == pytest.approx(two["geomean"] / one["geomean"]) and two["ideal"] == 2.0
    assert 0 < two["speedup_low"] < two["speedup"] < two["speedup_high"]
    assert two["speedup_interval"] == "95 % Welch t interval on logs"
    assert two["scaling_efficiency"] == pytest.approx(two["speedup"] / 2)
    # efficiency: 6 x the harness's counted multiply-adds x img/s, over the stored matmul rate of the node
    assert one["train_gflop_per_sample"] > 0
    assert one["of_matmul"] == pytest.approx(one["achieved_gflops"] / matmul["value"])

    table = run_cli("compare", "--workload", "trivial", "--by", "devices", env=env, check=True).stdout
    assert "compare scaling: scaling from 1 device (images/sec)" in table and "scaling eff." in table
    listed = cli_json("results", "list", "--workload", "trivial", "--status", "ok", env=env)
    assert sorted(r["world_size"] for r in listed) == [1, 1, 1, 2, 2, 2]
