"""The result store: one transaction per run, safe for parallel writers, on one of two backends: an SQLite file
(the embedded default, `dlrun.results.store.backend_sqlite`) or a site's PostgreSQL database (`store:
postgresql://...` in config.yaml, `dlrun.results.store.backend_postgres`), with the same schema, the same
queries and the same commands. `dlrun.results.store.location` says which one a command opens.

The schema and its versions are in `dlrun.results.store.schema`. Version 2 adds where a run came from (`site`,
`origin`), what experiment point it belongs to (`experiment`, `point`) and its comparability key (`key`, `key_hash`; see
`dlrun.results.key`), with the indexes that the `results list` filters and `compare` grouping use. Version 6 adds
the aggregates compare and report read (`dlrun.results.store.samples`), kept by `add_runs` and `delete_runs`.

Both backends take one write transaction at a time (SQLite's write lock, PostgreSQL's advisory lock), so the
aggregates stay exact with concurrent writers. Queries open the store without creating it: a store that does
not exist yet reads as empty. Errors are one line; a run whose id is stored already is sqlite3.IntegrityError
on either backend, so callers catch one exception.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlrun.errors import UsageError, unknown_name
from dlrun.results.fingerprint import checked
from dlrun.results.quality import run_quality
from dlrun.results.store.query import Filters, like_prefix, where
from dlrun.results.store.schema import COMPARED_VALUES, ORIGINS, PRIMARY_METRICS, RUN_COLUMNS, SCHEMA_VERSION, keyed
from dlrun.results.site import local_site
from dlrun.results.store.check import StoreError
from dlrun.results.store.fields import checked_fields
from dlrun.results.store.location import Location, PostgresUrl, is_postgres, parse_store
from dlrun.results.store import grouped, samples

__all__ = ["COMPARED_VALUES", "RUN_COLUMNS", "SCHEMA_VERSION", "Store", "StoreError"]

Pair = tuple[dict[str, Any], list[dict[str, Any]]]
Pairs = list[Pair]


def backend_for(location: Location) -> Any:
    """The backend that opens `location` (a SqliteBackend or a PostgresBackend)."""
    if is_postgres(location):
        from dlrun.results.store.backend_postgres import PostgresBackend  # psycopg only for such a store

        url = location if isinstance(location, PostgresUrl) else parse_store(location, "the store's location")
        return PostgresBackend(url)
    from dlrun.results.store.backend_sqlite import SqliteBackend

    return SqliteBackend(Path(location))


class Store:
    def __init__(self, path: Location):
        """`path`: the SQLite file, or a PostgreSQL store's URL (dlrun.results.store.location)."""
        self.backend = backend_for(path)
        self.path = self.backend.path  # the file, or the URL (its str() never shows a password)

    @property
    def kind(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.backend.name

    def exists(self) -> bool:
        """Whether the store may hold runs (a file that exists; a PostgreSQL store always may)."""
        return self.backend.exists()

    def check(self, integrity: bool = False) -> None:
        """Refuse now (one line) a store that every later use would refuse: commands call it first. With
        `integrity`, also one damaged past its header and tables (for SQLite its quick_check: every page read,
        0.3 s for 100,000 runs), as a run does before its job, so that no job runs for a store that cannot take it."""
        self.backend.check(integrity)

    @contextmanager
    def connect(self) -> Iterator[Any]:
        """A connection that writes; the first one creates the store's schema or upgrades it."""
        with self.backend.connect() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """A connection for queries that creates nothing: a store without tables yet reads as empty. A store
        of an older schema is upgraded first (through a writing connection: the upgrade is one transaction)."""
        with self.backend.reading() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A connection in one write transaction that holds the store's write lock from its start, committed
        when the block ends, rolled back when it raises."""
        with self.backend.transaction() as conn:
            yield conn

    def has_run(self, run_id: str) -> bool:
        with self.reading() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Insert a run and its result rows atomically (BEGIN IMMEDIATE takes the write lock up front),
        trying again while other writers hold the store.

        The comparability key is computed here from the record and its rows, so every writer (runs,
        imported logs, bundles, matmul measurements) stores one; a run that names no site was made here."""
        self.add_runs([(run, results)])

    def add_runs(self, runs: Pairs | Callable[[], Iterable[Pair]], *, skip_existing: bool = False,
                 same_provenance: tuple[str, ...] = ()) -> list[str]:
        """Insert (run, rows) pairs in one transaction: all of them or none; returns the ids inserted.

        `runs` is a list of pairs, or a function that returns a fresh iterable of them each time it is called
        (a bundle's runs are read one at a time from disk, and read again if the transaction is retried).
        With `skip_existing`, a run whose id is stored already is left out; with `same_provenance`, so is a
        run for which a stored run has equal values of all these provenance fields (a log imported twice).
        Both are decided inside the transaction, so parallel importers of the same data add it once. The
        transaction is tried again while other writers hold the store."""
        if not callable(runs):
            prepared = [self._row(run, results) for run, results in runs]
            pairs: Callable[[], Iterable[Pair]] = lambda: prepared  # noqa: E731
        else:
            pairs = lambda: (self._row(run, results) for run, results in runs())  # noqa: E731

        def write() -> list[str]:
            added: list[str] = []
            with self.transaction() as conn:
                pending = samples.Pending(conn)
                for row, results in pairs():
                    if skip_existing and conn.execute("SELECT 1 FROM runs WHERE id = ?", (row["id"],)).fetchone():
                        continue
                    if same_provenance and self._provenance_stored(conn, row["provenance"], same_provenance):
                        continue
                    cols = list(row)
                    conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                 [row[c] for c in cols])
                    conn.executemany(
                        "INSERT INTO results (run_id, metric, value, unit, data) VALUES (?, ?, ?, ?, ?)",
                        [(row["id"], r["metric"], r["value"], r["unit"], json.dumps(r, sort_keys=True))
                         for r in results])
                    if row["status"] == "ok":
                        for r in results:
                            if r["metric"] in PRIMARY_METRICS:
                                pending.add(row, r["metric"], r["unit"], r["value"])
                    added.append(row["id"])
                pending.flush()
            return added

        return self.backend.retry(write)

    def delete_runs(self, run_ids: Iterable[str], chunk: int = 500) -> list[str]:
        """Delete these runs and their result rows in one transaction; the ids that were stored."""
        ids = list(dict.fromkeys(run_ids))

        def write() -> list[str]:
            found: list[str] = []
            with self.transaction() as conn:
                for start in range(0, len(ids), chunk):
                    part = ids[start:start + chunk]
                    marks = ", ".join("?" * len(part))
                    found += [row[0] for row in conn.execute(f"SELECT id FROM runs WHERE id IN ({marks})", part)]
                    samples.remove(conn, part)
                    conn.execute(f"DELETE FROM results WHERE run_id IN ({marks})", part)
                    conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", part)
            return found

        return self.backend.retry(write)

    @staticmethod
    def _row(run: dict[str, Any], results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        checked_fields(run, results)  # every origin: times, counts, names, values (dlrun.results.store.fields)
        row = {col: run.get(col) for col in RUN_COLUMNS}
        row["site"] = run.get("site") or local_site()
        row["origin"] = run.get("origin") or "local"
        if row["origin"] not in ORIGINS:
            raise ValueError(f"origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
        fingerprint = checked(run.get("fingerprint"))
        row["fingerprint"] = json.dumps(fingerprint, sort_keys=True) if fingerprint else None
        quality = run_quality(row["status"], results)  # judged here by this dlrun's thresholds, as the key is
        row["quality"], row["verdict"] = json.dumps(quality, sort_keys=True), quality["verdict"]
        row["key"], row["key_hash"] = keyed({**run, "origin": row["origin"], "site": row["site"],
                                             "fingerprint": fingerprint}, results, run.get("key"))
        row["plan"] = json.dumps(run["plan"], sort_keys=True)
        row["provenance"] = json.dumps(run.get("provenance", {}), sort_keys=True)
        return row, results

    @staticmethod
    def _provenance_stored(conn: Any, provenance_json: str, fields: tuple[str, ...]) -> bool:
        provenance = json.loads(provenance_json)
        values = [provenance.get(name) for name in fields]
        if None in values:  # a run that lacks one of the facts is like no stored run
            return False
        if not all(name.isidentifier() for name in fields):
            raise ValueError(f"not provenance field names: {fields}")
        if getattr(conn, "dialect", "sqlite") == "postgresql":  # its json_extract reads every value as text
            values = [value if isinstance(value, str) else json.dumps(value) for value in values]
        clauses = " AND ".join(f"json_extract(provenance, '$.{name}') = ?" for name in fields)
        return conn.execute(f"SELECT 1 FROM runs WHERE {clauses} LIMIT 1", values).fetchone() is not None

    def list_runs(self, limit: int | None = 50, filters: Filters | None = None) -> list[dict[str, Any]]:
        clause, params = where(filters or Filters())
        metrics = ", ".join(f"'{m}'" for m in PRIMARY_METRICS)
        query = (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value, res.unit FROM runs r "
                 f"LEFT JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) "
                 f"{clause} ORDER BY r.created_at DESC, r.id DESC")
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        with self.reading() as conn:
            rows = conn.execute(query, params).fetchall()
        return [dict(zip((*RUN_COLUMNS, "value", "unit"), row)) for row in rows]

    def run_ids(self) -> list[str]:
        """Every stored run's id, in order (a copy of the whole store reads its runs by these, in chunks)."""
        with self.reading() as conn:
            return [row[0] for row in conn.execute("SELECT id FROM runs ORDER BY id")]

    def count_runs(self, filters: Filters | None = None) -> int:
        """How many stored runs `filters` selects."""
        clause, params = where(filters or Filters())
        with self.reading() as conn:
            return conn.execute(f"SELECT count(*) FROM runs r {clause}", params).fetchone()[0]

    def distinct(self, column: str) -> list[str]:
        """The values a runs column holds (for checking filter values); `column` is one of RUN_COLUMNS."""
        if column not in RUN_COLUMNS:
            raise ValueError(f"not a runs column: {column}")
        with self.reading() as conn:
            return [row[0] for row in conn.execute(f"SELECT DISTINCT {column} FROM runs")]

    def has_value(self, column: str, value: Any) -> bool:
        """Whether a stored run has `value` in `column` (one of RUN_COLUMNS): one look through its index."""
        if column not in RUN_COLUMNS:
            raise ValueError(f"not a runs column: {column}")
        with self.reading() as conn:
            return conn.execute(f"SELECT 1 FROM runs WHERE {column} = ? LIMIT 1", (value,)).fetchone() is not None

    def resolve_ids(self, prefixes: list[str]) -> tuple[str, ...]:
        """Full run ids for ids or unique prefixes (the rules of `get_run`)."""
        return tuple(self._resolve(prefix) for prefix in prefixes)

    def _resolve(self, run_id: str) -> str:
        with self.reading() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                return run_id
            matches = conn.execute("SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY id",
                                   (like_prefix(run_id),)).fetchall()
            if len(matches) == 1:
                return matches[0][0]
            if len(matches) > 1:
                raise UsageError(f"run id prefix {run_id!r} is ambiguous; valid: "
                                 + ", ".join(m[0] for m in matches[:10]))
            recent = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 200")]
        raise unknown_name("run id", run_id, recent)

    def get_run(self, run_id: str) -> dict[str, Any]:
        run_id = self._resolve(run_id)
        with self.reading() as conn:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)}, {', '.join(_RECORD_COLUMNS)} FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            results = conn.execute("SELECT data FROM results WHERE run_id = ? ORDER BY metric",
                                   (run_id,)).fetchall()
        return _full_run(row, [r[0] for r in results])

    def get_runs(self, filters: Filters) -> list[dict[str, Any]]:
        """Every run `filters` selects, as `get_run` gives it, sorted by id: two queries in one connection
        (exports read thousands of runs)."""
        clause, params = where(filters)
        with self.reading() as conn:
            rows = conn.execute(f"SELECT r.{', r.'.join(RUN_COLUMNS + _RECORD_COLUMNS)} FROM runs r "
                                f"{clause} ORDER BY r.id", params).fetchall()
            results: dict[str, list[str]] = {}
            for run_id, data in conn.execute(f"SELECT res.run_id, res.data FROM results res JOIN runs r "
                                             f"ON r.id = res.run_id {clause} ORDER BY res.run_id, res.metric", params):
                results.setdefault(run_id, []).append(data)
        return [_full_run(row, results.get(row[0], [])) for row in rows]

    def run_reasons(self, run_ids: Iterable[str], verdict: str, chunk: int = 500) -> dict[str, list[str]]:
        """run id -> its stored quality reasons of `verdict` (e.g. `straggler`), for those of `run_ids` that
        have one (compare and report name them beside a point's verdict counts)."""
        with self.reading() as conn:
            return grouped.reasons(conn, run_ids, verdict, chunk)

    def grouped_values(self, filters: Filters, by_site: bool = False, compared: str = "rate") -> list[dict[str, Any]]:
        """The primary values (or another of COMPARED_VALUES) of successful runs, read run by run and grouped by
        key (and site): one row per group with its key, metric, unit, run ids and values (in matching order),
        their verdicts and the image names seen (dlrun.results.store.grouped)."""
        with self.reading() as conn:
            return grouped.by_key(conn, filters, by_site, compared)

    def summed_groups(self, filters: Filters, by_site: bool = False,
                      compared: str = "rate") -> list[dict[str, Any]] | None:
        """What grouped_values gives, from the aggregates kept per group (dlrun.results.store.samples): the
        exact moments of each group's values instead of the values, its median, its newest run ids (all of
        them up to samples.LISTED) and the ids of its runs whose value is no rate. None where the aggregates
        cannot answer: a selection by run id, time or status, or a value other than the primary rate."""
        if compared != "rate" or filters.run_ids or filters.since or filters.status:
            return None
        clause, params = where(filters, alias="s")
        with self.reading() as conn:
            return samples.grouped(conn, clause, params, by_site)

    def sample_median(self, parts: list[int], n: int) -> float:
        """The median of the values of these aggregate groups (n of them)."""
        with self.reading() as conn:
            return samples.median(conn, parts, n)

    def sample_values(self, parts: list[int], limit: int) -> list[float]:
        """Up to `limit` values of these aggregate groups, of their newest runs."""
        with self.reading() as conn:
            return samples.values(conn, parts, limit)

    def latest_matmul(self, system: str, precision: str) -> dict[str, Any] | None:
        """The newest stored matrix-multiply rate of `system` at `precision` (run id, time, GFLOP/s, data)."""
        # `+` keeps the planner on runs_workload (few matmul runs): ANALYZE's average rows per system is
        # lower than per workload, so it would otherwise walk every run of the system (0.06 s per call at
        # 100,000 runs, once per system and precision in compare and report)
        with self.reading() as conn:
            row = conn.execute(
                "SELECT r.id, r.created_at, res.value, res.data FROM runs r JOIN results res "
                "ON res.run_id = r.id AND res.metric = 'matmul' WHERE r.workload = 'matmul' AND +r.system = ? "
                "AND +r.precision = ? AND +r.status = 'ok' ORDER BY r.created_at DESC, r.id DESC LIMIT 1",
                (system, precision)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "created_at": row[1], "gflops": row[2], "data": json.loads(row[3])}


#: The JSON columns a whole record adds to RUN_COLUMNS, in the order `_full_run` reads them.
_RECORD_COLUMNS = ("key", "plan", "provenance", "fingerprint", "quality")


def _full_run(row: tuple, results: list[str]) -> dict[str, Any]:
    """A runs row (RUN_COLUMNS, then _RECORD_COLUMNS) and its results' data as one record."""
    run = dict(zip(RUN_COLUMNS, row[: len(RUN_COLUMNS)]))
    for name, text in zip(_RECORD_COLUMNS, row[len(RUN_COLUMNS):]):
        run[name] = json.loads(text) if text else None
    run["results"] = [json.loads(data) for data in results]
    return run
