"""`dlrun results import-log --machine`: say which machine a log came from, so that its runs can be compared
with runs made here. `here` is this node, probed now (the log was made on it); a stored run's id is that run's
site and machine (the log was made where that run was). Without it an imported log's machine is unknown, and
nothing can be shown to match it."""
from __future__ import annotations

from typing import Any

from dlrun.errors import UsageError

HERE = "here"


def machine_of(value: str, store, site: str | None) -> tuple[str | None, dict[str, Any] | None]:
    """(site, fingerprint) that `--machine VALUE` names; `site` is what --site said, if anything."""
    from dlrun.results.fingerprint import this_machine
    from dlrun.results.site import local_site

    if value == HERE:
        here = local_site()
        if site is not None and site != here:
            raise UsageError(f"--machine here is this node, at site {here}; --site {site} names another site "
                             "(leave out one of them)")
        return here, this_machine(fabric=None, nodes=None, device=None)
    try:
        run = store.get_run(value)
    except UsageError as exc:
        raise UsageError(f"--machine {value!r}: {exc}; valid: {HERE}, or the id of a stored run") from None
    if not run.get("fingerprint"):
        raise UsageError(f"--machine {value!r}: run {run['id']} has no recorded machine (stored before dlrun kept "
                         f"fingerprints, or imported without --machine); valid: {HERE}, or a run that has one")
    if site is not None and site != run["site"]:
        raise UsageError(f"--machine {value} ran at site {run['site']}; --site {site} names another site "
                         "(leave out one of them)")
    return run["site"], run["fingerprint"]


def with_machine(pairs: list[tuple[dict, list]], site: str | None, fingerprint: dict[str, Any] | None):
    """The (run, rows) pairs of a log with the machine's site (this site where none is named: the store would
    record it, and the key must hold it before) and fingerprint (its node count and fabric the log's own;
    where the log says the device it computed on, that too)."""
    from dlrun.results.site import local_site

    site = site or local_site()
    if fingerprint is None:
        return [({**run, "site": site}, rows) for run, rows in pairs]
    out = []
    for run, rows in pairs:
        extra = (rows[0].get("extra") or {}) if rows else {}
        device = extra.get("device") if extra.get("device") in ("cpu", "cuda") else fingerprint.get("device")
        machine = {**fingerprint, "nodes": run.get("nodes"), "fabric": run.get("fabric"), "device": device}
        out.append(({**run, "site": site, "fingerprint": machine}, rows))
    return out
