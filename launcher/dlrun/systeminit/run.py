"""`dlrun systems init` put together: probe this node, ask each scheduler that has tools here for its view
of the cluster, draft the entries, render them, validate them, and say what writing would change."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from dlrun.catalog.models import NAME_PATTERN, SystemSpec
from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.registry import RUNTIMES, SCHEDULERS

from dlrun.systeminit import Probed
from dlrun.systeminit.draft import common_tail, from_node, from_view
from dlrun.systeminit.text import diff, render, validate


@dataclass(frozen=True)
class Drafted:
    text: str
    spec: SystemSpec
    path: Path
    old: str | None      # the file's text now, None where there is none
    scheduler: str

    @property
    def diff(self) -> str:
        return "" if self.old is None else diff(self.old, self.text, self.path)


def probe() -> Probed:
    from dlrun.probe.cpu import cpu_inventory
    from dlrun.probe.host import probe_host

    return Probed(probe_host(), cpu_inventory())


def scheduler_view(name: str | None):
    """(scheduler name, its launchers, its view) for the scheduler asked for, else the first with a view here."""
    if name is not None and name not in SCHEDULERS.names():
        raise unknown_name("scheduler", name, SCHEDULERS.names())
    for candidate in [name] if name else SCHEDULERS.names():
        try:
            scheduler = SCHEDULERS.get(candidate)
            view = scheduler.cluster_view()
        except DlrunError:
            if name is not None:
                raise  # asked for: say why it gave no view (its tool's own words)
            continue   # looking around: a client without a cluster to talk to is no view
        if view is not None:
            return candidate, scheduler.step_launchers, view
    if name is not None and name != SystemSpec.model_fields["scheduler"].default:
        raise UsageError(f"--scheduler {name}: its tools give no view of nodes here (not installed, or dlrun "
                         "reads none of this scheduler's yet); valid: a scheduler whose client answers on this node")
    return SystemSpec.model_fields["scheduler"].default, (), None


def draft(name: str, path: Path, *, partition: str | None = None, scheduler: str | None = None,
          probed: Probed | None = None) -> Drafted:
    if not re.match(NAME_PATTERN, name):
        raise UsageError(f"bad system name {name!r}: letters, digits and . _ + - (first a letter or digit)")
    probed = probed or probe()
    chosen, launchers, view = scheduler_view(scheduler)
    if view is None:
        if partition is not None:
            raise UsageError(f"--partition {partition}: no scheduler here describes partitions; valid: leave it out "
                             "(this node alone), or run on a login node of the cluster")
        entries = from_node(name, probed, chosen)
    else:
        entries = from_view(name, probed, view, chosen, launchers, partition)
    entries += common_tail(RUNTIMES.names())
    when = time.strftime("%Y-%m-%d", time.gmtime())
    text = render(entries, view.source if view else None, probed.host, when)
    spec = validate(text, path)
    old = path.read_text() if path.is_file() else None
    return Drafted(text, spec, path, old, chosen)
