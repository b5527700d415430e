"""The store's aggregates (dlrun.results.store.samples): compare from them gives what compare from every run's row
gives, to the last bit, on random stores; the sums after adds and deletes are those of a store built afresh; the
queries that read them, and the filtered list, use indexes (no full scan)."""
from __future__ import annotations

import json
import random
import re
import sqlite3

from compare_data import record
from dlrun.results.compare import compare
from dlrun.results.moments import Moments
from dlrun.results.store import Store
from dlrun.results.store import samples
from dlrun.results.store.query import Filters, where
from dlrun.results.store.schema import PRIMARY_METRICS, RUN_COLUMNS

CALM = {"window_s": 30.0, "steps": 100, "step_rate_spread": 0.01,
        "hosts": {"n1": {"others_share": 0.01, "node_cpus": 40, "threads_per_rank": 5, "cpus_per_rank": 5}}}


class RowByRow(Store):
    """The same store read the way compare read it before the aggregates: every selected run's row."""

    def summed_groups(self, filters, by_site=False, compared="rate"):
        return None


def _random_store(path, seed: int, keep: list | None = None) -> tuple[Store, list[str]]:
    rng = random.Random(seed)
    store = Store(path)
    ids = []
    pairs = []
    for system in ("dgx2", "dgx1v", "a100"):
        for devices in (1, 2, 4):
            for image, digest in (("pt-a", "sha256:" + "a" * 64), ("pt-b", "sha256:" + "b" * 64)):
                centre = rng.uniform(50, 5000) * devices
                for _ in range(rng.randint(1, 9)):
                    value = centre * rng.lognormvariate(0, rng.choice((0.001, 0.03, 0.3)))
                    run, rows = record(value, system=system, devices=devices, image=image, digest=digest,
                                       site=rng.choice(("here", "there")), verdict_inputs=rng.choice((CALM, None)),
                                       created=f"2026-01-{rng.randint(1, 28):02d}T00:00:{rng.randint(0, 59):02d}Z")
                    pairs.append((run, rows))
                    ids.append(run["id"])
    rng.shuffle(pairs)
    for start in range(0, len(pairs), 7):  # several transactions, in random order
        store.add_runs(pairs[start:start + 7])
    if keep is not None:
        keep.extend(pairs)
    return store, ids


def _both(store: Store, filters: Filters, **how):
    summed = compare(store, filters, allow_mismatch=True, **how).to_dict()
    rows = compare(RowByRow(store.path), filters, allow_mismatch=True, **how).to_dict()
    return summed, rows


def test_compare_from_the_aggregates_is_compare_from_the_rows(store_location):
    for seed in range(4):
        store, ids = _random_store(store_location, seed)
        store.delete_runs(random.Random(seed).sample(ids, len(ids) // 5))  # deletes are exact too
        for filters, how in ((Filters(), {}), (Filters(image=("pt-b",)), {"by": "system", "baseline": "dgx2"}),
                             (Filters(system=("dgx2",), image=("pt-a",)), {"by": "devices"}),
                             (Filters(system=("dgx1v",)), {"by": "image"}),
                             (Filters(site=("here",)), {"by": "devices"}), (Filters(), {"by": "site"})):
            summed, rows = _both(store, filters, **how)
            # every number, interval, verdict and run list, compared exactly (floats bit for bit)
            assert json.dumps(summed, sort_keys=True, default=str) == json.dumps(rows, sort_keys=True, default=str)
            assert summed["rows"], (seed, how)
        store.delete_runs(ids)  # the next seed's store starts empty
        with store.reading() as conn:
            assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == 0


def _groups(conn) -> dict:
    cols = ", ".join(samples.IDENTITY)
    return {row[:len(samples.IDENTITY)]: row[len(samples.IDENTITY):] for row in conn.execute(
        f"SELECT {cols}, n, sum_log, sum_log2, sum, sum2, min, max, newest FROM samples")}


def test_the_sums_after_adds_and_deletes_are_those_of_the_runs_left(store_location):
    pairs: list = []
    store, ids = _random_store(store_location, 7, pairs)
    store.delete_runs(ids[::3])
    # a bundle's import: pairs read one at a time, those stored already skipped (the deleted ones come back)
    back = store.add_runs(lambda: iter(pairs), skip_existing=True)
    assert sorted(back) == sorted(ids[::3])
    store.delete_runs(ids[::3])
    assert_aggregates_exact(store)


def assert_aggregates_exact(store: Store) -> None:
    """The store's aggregates are those made afresh from its runs, and each group's moments those of its values."""
    with store.transaction() as conn:
        kept = _groups(conn)
        samples.rebuild(conn, PRIMARY_METRICS)
        assert _groups(conn) == kept and kept
        # and each group's moments are those of its runs' values, computed from them
        for ident, (n, *sums, low, high, _) in kept.items():
            if not ident[-1]:
                continue
            values = [v for (v,) in conn.execute(
                "SELECT value FROM sample_runs JOIN samples ON samples.id = sample WHERE " +
                " AND ".join(f"samples.{name} IS ?" for name in samples.IDENTITY), ident)]
            assert Moments.of(values) == Moments.from_text(n, *sums, low, high)


def _plan(conn, query: str, params=()) -> str:
    return " | ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + query, params))


def _reads() -> dict[str, tuple[str, tuple]]:
    """The reads that must not scan a table (as the store writes them, for SQLite): the filtered list, a
    report's count and its newest runs, and the per-group reads of compare and report."""
    clause, params = where(Filters(workload=("resnet50",), system=("dgx2",), since="2026-01-02T00:00:00Z"))
    report, report_params = where(Filters(workload=("resnet50",), image=("pt-a",)))
    group = tuple(1 if name in ("batch_size", "nodes", "rate") else "k" for name in samples.IDENTITY)
    return {
        "list": (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value FROM runs r LEFT JOIN results res "
                 f"ON res.run_id = r.id AND res.metric = 'throughput' {clause} "
                 "ORDER BY r.created_at DESC, r.id DESC LIMIT 50", tuple(params)),
        "count": (f"SELECT count(*) FROM runs r {report}", tuple(report_params)),  # a report's first query
        "newest": (f"SELECT r.{', r.'.join(RUN_COLUMNS)} FROM runs r {report} "
                   "ORDER BY r.created_at DESC, r.id DESC LIMIT 500", tuple(report_params)),  # no sort of all
        "median": ("SELECT value FROM sample_runs WHERE sample IN (1) ORDER BY value LIMIT 2 OFFSET 3", ()),
        "group newest": ("SELECT created_at, run_id FROM sample_runs WHERE sample = ? "
                         "ORDER BY created_at DESC, run_id DESC LIMIT ?", (1, 100)),
        "groups": ("SELECT s.id FROM samples s " + where(Filters(workload=("resnet50",)), alias="s")[0],
                   ("resnet50",)),
        "group of a run": (f"SELECT id FROM samples WHERE {samples.group_clause(group)}", group),  # on insert
    }


def test_the_filtered_list_and_the_per_group_reads_use_indexes(tmp_path):
    store, _ = _random_store(tmp_path / "s.sqlite", 3)
    conn = sqlite3.connect(store.path)
    conn.execute("ANALYZE")
    plans = {name: _plan(conn, query, params) for name, (query, params) in _reads().items()}
    conn.close()
    listed = plans["list"]
    assert "SCAN r" not in listed and "USING INDEX runs_" in listed and "B-TREE FOR ORDER BY" not in listed, listed
    assert "COVERING INDEX runs_filters" in plans["count"], plans["count"]
    assert "B-TREE FOR ORDER BY" not in plans["newest"] and "SCAN r" not in plans["newest"], plans["newest"]
    median, newest = plans["median"], plans["group newest"]
    assert "COVERING INDEX sample_runs_value (sample=?)" in median and "TEMP B-TREE" not in median, median
    assert "COVERING INDEX sample_runs_newest (sample=?)" in newest and "TEMP B-TREE" not in newest, newest
    assert "SCAN" not in plans["groups"], plans["groups"]
    assert "USING INDEX samples_key" in plans["group of a run"], plans["group of a run"]


def test_on_postgresql_the_same_reads_use_indexes(postgres_url):
    """PostgreSQL's planner reads a table this small whole, and sorts its few rows, by choice; with sequential
    scans and sorts priced out, a `Seq Scan` left in a plan means that no index serves the query, and a plain
    `Sort` that no index gives the order (an `Incremental Sort` of the rows of one timestamp finishes the
    index's order). The million-run store's plans were read with EXPLAIN ANALYZE too (bench/RESULTS.md)."""
    import psycopg

    from dlrun.results.store.backend_postgres import translate

    _random_store(postgres_url, 3)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")  # statistics, and the visibility map an index-only scan needs
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_sort = off")
        plans = {name: " | ".join(row[0] for row in conn.execute("EXPLAIN " + translate(query), params))
                 for name, (query, params) in _reads().items()}
    for name, plan in plans.items():
        assert "Seq Scan" not in plan, (name, plan)
        assert re.search(r"(?<!Incremental )Sort  \(", plan) is None, (name, plan)
    assert "Index Only Scan using runs_filters" in plans["count"], plans["count"]
    assert "samples_key" in plans["group of a run"], plans["group of a run"]
