"""`dlrun report`: the selected runs as one self-contained HTML page with PNG plots, in a folder.

    painter = Painter()                             a forked process that imports matplotlib meanwhile
    report = gather(store, filters, ...)            the runs through compare's modes, with provenance
    add_published(report, catalog, spec, store)     an experiment's published numbers beside them
    write(report, out, store_path, painter)         index.html + scaling.png + bars.png, all or nothing

The page references its plots by relative name (they travel with it as one folder) rather than embedding
them: the HTML stays small and the PNGs stay usable on their own. Nothing is fetched over the network.
A new folder is written beside `out` under a temporary name and renamed into place, so a failed report
never leaves half of one. Over an earlier report, the files this report writes replace that report's, one
rename each (the page last), and the files the earlier report wrote but this one does not are removed;
anything else in the folder (a user's notes, other files) is kept. Which files a report wrote is listed in
its marker file, `.dlrun-report`. A folder holding files but no marker is refused, as is a dangling link.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from dlrun.errors import DlrunError, UsageError
from dlrun.report.gather import Published, Point, Report, gather
from dlrun.report.painter import Painter

# dlrun.report.published (an experiment's references, through dlrun.reproduce) is imported by whoever
# needs it: a report of plain filters does not pay for planning an experiment.
__all__ = ["Painter", "Point", "Published", "Report", "check_out", "gather", "write"]

#: The page; its presence marks a folder as an earlier report that may be replaced.
PAGE = "index.html"
MARKER = ".dlrun-report"


#: A name a report writes: plain, in the folder itself (a marker listing anything else is not obeyed).
_WRITTEN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def check_out(out: Path) -> Path:
    """The folder to write, refused (exit 2) when it is a file, a dangling link, a folder holding something
    but no earlier report, or in a place that cannot be written."""
    out = Path(out).absolute()
    if out.is_symlink() and not out.exists():
        raise UsageError(f"--out {str(out)!r} is a symbolic link to {os.readlink(out)!r}, which does not exist; "
                         "give a folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {str(out)!r} is a file; give a folder for the page and its plots")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UsageError(f"--out {str(out)!r} holds files that are not a dlrun report; give a new or empty folder")
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {str(out)!r} cannot be written: {str(parent)!r} is not a writable folder")
    return out


def written_files(out: Path) -> set[str]:
    """The files the report in `out` wrote, as its marker lists them (none for a marker that lists none)."""
    try:
        listed = json.loads((out / MARKER).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {name for name in listed if isinstance(name, str) and _WRITTEN_NAME.match(name)} if isinstance(
        listed, list) else set()


def write(report: Report, out: Path, store_path: Path, painter: Painter | None = None) -> Path:
    """Write the page and its plots into `out` (see check_out and the module notes). The plots are drawn by
    `painter` (a forked process, started before the store was read) while this process writes the tables."""
    from dlrun.report import page

    missing = [name for name in ("matplotlib", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        raise DlrunError(f"dlrun report needs matplotlib and pandas ({', '.join(missing)} missing); install them "
                         "with: pip install 'dlrun[report]'")
    out = check_out(out)
    into = out.is_dir()  # an earlier report (or an empty folder): its other files stay
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out if into else out.parent))
    except OSError as exc:
        raise UsageError(f"--out {str(out)!r} cannot be written: {exc.strerror}") from None
    painter = painter or Painter(fork=False)  # in-process: nothing to close
    try:
        painter.draw(report, tmp)
        tables = page.render_tables(report)
        drawn = painter.result()
        (tmp / PAGE).write_text(page.render(report, drawn, str(store_path), tables), encoding="utf-8")
        names = sorted(path.name for path in tmp.iterdir())
        (tmp / MARKER).write_text(json.dumps({"written_by": "dlrun report", "files": names}, indent=1) + "\n")
        if into:
            _update(tmp, out, names)
        else:
            os.chmod(tmp, 0o755)
            os.replace(tmp, out)
    except BaseException as exc:
        painter.close()  # before the folder it may still be writing into is removed
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise UsageError(f"--out {str(out)!r} cannot be written: {exc.strerror or exc}") from None
        raise
    return out


def _update(new: Path, out: Path, names: list[str]) -> None:
    """Move the new report's files from `new` (inside `out`) into `out`, the page and marker last; remove the
    files the earlier report wrote that this one does not; keep everything else."""
    stale = written_files(out) - set(names) - {MARKER}
    for name in [*sorted(set(names) - {PAGE}), PAGE, MARKER]:
        os.replace(new / name, out / name)
    for name in sorted(stale):
        path = out / name
        if path.is_file() or path.is_symlink():
            path.unlink()
    new.rmdir()
