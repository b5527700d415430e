"""Moving a store between the backends (`dlrun results copy SOURCE`): every run of another store, an SQLite file
or a PostgreSQL database, added to this one as it is stored there (its origin, site, key, record and results
kept; its quality judged again by this dlrun, as every write does), in one transaction; a run whose id is
stored already is left out, so copying twice adds nothing. A bundle is for runs between sites: its import
refuses runs of this site's own name, which a move of the site's store consists of."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dlrun.results.store import Store
from dlrun.results.store.query import Filters


def copy_runs(source: Store, target: Store, chunk: int = 1000) -> tuple[list[str], int]:
    """(the ids added to `target`, how many runs `source` holds); `source` is read `chunk` runs at a time, again
    if the transaction is retried."""
    ids = source.run_ids()  # ids alone: a million runs' listed columns would hold a gigabyte here

    def pairs() -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
        for start in range(0, len(ids), chunk):
            for run in source.get_runs(Filters(run_ids=tuple(ids[start:start + chunk]))):
                results = run.pop("results")
                yield run, results

    return target.add_runs(pairs, skip_existing=True), len(ids)
