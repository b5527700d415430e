"""The result store as every command opens it: first the runs of a dlrun that died are recovered (stored,
published), runs still in progress are named, so that no run directory is left unlisted, and what an
interrupted bundle import or tuning trial left behind is removed."""
from __future__ import annotations

from dlrun.cli.output import warn


def open_store(before_jobs: bool = False):
    """The store, checked (one line for a damaged one); `before_jobs`: checked whole (SQLite's quick check),
    as a command that is about to run jobs needs it."""
    from dlrun.files import remove_orphans
    from dlrun.paths import TUNE_TRIALS, dlrun_home, runs_dir, staging_dirs
    from dlrun.results.store.import_staging import clean_interrupted_imports
    from dlrun.results.store import Store
    from dlrun.results.store.location import store_location

    store = Store(store_location())  # config.yaml's `store:` (PostgreSQL), else the SQLite file
    clean_interrupted_imports(dlrun_home())  # what an import killed by a signal left in imported/.staging-*
    remove_orphans(dlrun_home() / TUNE_TRIALS, "trial-*", ".dlrun.lock")  # and a tune killed in its trials
    store.check(integrity=before_jobs)  # a damaged or foreign store: one line now, not after a job or an import
    if staging_dirs(runs_dir()):  # the executor (and what it imports) is loaded only when there is work for it
        from dlrun.execute.recovery import recover_runs

        for note in recover_runs(runs_dir(), store):
            warn(note)
    return store
