"""`dlrun report`: the selected runs as one self-contained HTML page with PNG plots, in a folder.

    painter = Painter()                             a forked process that imports matplotlib meanwhile
    report = gather(store, filters, ...)            the runs through compare's modes, with provenance
    add_published(report, catalog, spec, store)     an experiment's published numbers beside them
    write(report, out, store_path, painter)         index.html + scaling.png + bars.png, all or nothing

The page references its plots by relative name (they travel with it as one folder) rather than embedding
them: the HTML stays small and the PNGs stay usable on their own. Nothing is fetched over the network.
The folder is written beside `out` under a temporary name and renamed into place, so a reader (or a
failed report) never leaves half of one; an earlier report in `out` is replaced, anything else refused.
"""
from __future__ import annotations

import importlib.util
import os
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


def check_out(out: Path) -> Path:
    """The folder to write, refused (exit 2) when it is a file, a folder holding something other than an
    earlier report, or in a place that cannot be written."""
    out = Path(out).absolute()
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


def write(report: Report, out: Path, store_path: Path, painter: Painter | None = None) -> Path:
    """Write the page and its plots into `out` (see check_out), all or nothing. The plots are drawn by
    `painter` (a forked process, started before the store was read) while this process writes the tables."""
    from dlrun.report import page

    missing = [name for name in ("matplotlib", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        raise DlrunError(f"dlrun report needs matplotlib and pandas ({', '.join(missing)} missing); install them "
                         "with: pip install 'dlrun[report]'")
    out = check_out(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise UsageError(f"--out {str(out)!r} cannot be written: {exc.strerror}") from None
    painter = painter or Painter(fork=False)  # in-process: nothing to close
    try:
        painter.draw(report, tmp)
        tables = page.render_tables(report)
        drawn = painter.result()
        (tmp / PAGE).write_text(page.render(report, drawn, str(store_path), tables), encoding="utf-8")
        (tmp / MARKER).write_text("written by dlrun report; the folder is replaced by the next report\n")
        os.chmod(tmp, 0o755)
        _replace(tmp, out)
    except BaseException:
        painter.close()  # before the folder it may still be writing into is removed
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _replace(new: Path, out: Path) -> None:
    """Rename `new` to `out`; an earlier report there is moved aside first and removed after."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
        os.replace(out, old / "report")
    try:
        os.replace(new, out)
    except BaseException:
        if old is not None:
            os.replace(old / "report", out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
