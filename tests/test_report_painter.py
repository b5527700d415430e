"""The report's plotting process (`dlrun.report.Painter`): it draws exactly what drawing in-process draws, and
it ends with its parent however the parent ends: a written report, a killed child, Ctrl-C on `dlrun report`,
a killed parent. Real processes and real signals throughout."""
from __future__ import annotations

import dataclasses
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from report_data import fill, no_model_counts

from dlrun.errors import DlrunError
from dlrun.report import Painter, gather, write
from dlrun.results.store.query import Filters


def _report(home: Path):
    store = fill(home)
    return store, gather(store, Filters(), title="t", selection="every stored run")


def _gone(pid: int, within: float = 60.0) -> bool:
    """Whether process `pid` has ended (a zombie waiting for a reaper counts as ended) within `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_the_forked_painter_draws_what_drawing_in_process_draws(dlrun_home, tmp_path):
    _, report = _report(dlrun_home)
    forked_dir, local_dir = tmp_path / "forked", tmp_path / "local"
    forked_dir.mkdir()
    local_dir.mkdir()
    with Painter() as painter:
        assert painter.forked and painter.pid != os.getpid()
        pid = painter.pid
        painter.draw(report, forked_dir)
        forked = painter.result()
    assert _gone(pid)
    with Painter(fork=False) as painter:
        assert not painter.forked and painter.pid is None
        painter.draw(report, local_dir)
        local = painter.result()
    assert [p.file for p in forked] == ["scaling.png", "bars.png"]
    assert [dataclasses.asdict(p) for p in forked] == [dataclasses.asdict(p) for p in local]
    assert len(forked[0].areas) == len(report.points) and forked[1].areas
    for plot in forked:
        assert (forked_dir / plot.file).read_bytes() == (local_dir / plot.file).read_bytes()


def test_a_process_running_threads_draws_in_process(dlrun_home, tmp_path):
    """Forking a process that runs other threads can copy a lock another thread holds: never done."""
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        with Painter() as painter:
            assert not painter.forked
    finally:
        release.set()
        other.join()


def test_a_killed_plotting_process_is_one_error_and_nothing_is_written(dlrun_home, tmp_path):
    store, report = _report(dlrun_home)
    out = tmp_path / "report"
    with Painter() as painter:
        os.kill(painter.pid, signal.SIGKILL)
        with pytest.raises(DlrunError, match=r"ended by signal 9 before it finished; nothing was written"):
            write(report, out, store.path, painter)
    assert not out.exists() and list(tmp_path.glob(".report*")) == []


def _held_reading(fifo: Path, proc: subprocess.Popen, within: float = 300.0) -> int:
    """Open `fifo` for writing once `proc` has opened it for reading, and return the descriptor: while the test
    holds it open and writes nothing, `proc` waits in its read. Fails if `proc` ends or never reads it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader yet
            if exc.errno != errno.ENXIO:
                raise
        time.sleep(0.01)
    out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
    pytest.fail(f"dlrun report never read {fifo} (exit {proc.poll()}): {out}{err}")


def test_ctrl_c_on_dlrun_report_ends_the_plotting_process_and_writes_nothing(dlrun_home, tmp_path):
    """Ctrl-C lands while the report is certainly unfinished, however fast the machine: its model-facts cache is
    a FIFO that the test opens for writing and writes nothing into, so the report waits in that read (after
    the store is read, with its plotting process forked) until the signal comes."""
    fill(dlrun_home)
    out = tmp_path / "report"
    fifo = tmp_path / "cache" / "dlrun" / "model-facts.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "report", "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    writer = None
    try:
        writer = _held_reading(fifo, proc)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, "dlrun report has not forked its plotting process"
        child = int(children[0])
        assert proc.poll() is None and not out.exists()
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole foreground group
        _, err = proc.communicate(timeout=120)
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert _gone(child)
    assert not out.exists() and list(tmp_path.glob(".report*")) == []


def test_the_plotting_process_ends_when_its_parent_is_killed(tmp_path):
    script = ("import os, signal\n"
              "from dlrun.report import Painter\n"
              "painter = Painter()\n"
              "assert painter.forked\n"
              "print(painter.pid, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _gone(int(proc.stdout.split()[0]))


def _session_alive(sid: int) -> list[int]:
    """Processes of session `sid` still running (zombies awaiting a reaper are not)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            alive.append(int(stat.parent.name))
    return alive


@pytest.mark.parametrize("args, code", [(["--bogus-option"], 2), (["--workload", "no-such-workload"], 2), ([], 0)])
def test_dlrun_report_leaves_no_process_behind(dlrun_home, tmp_path, args, code):
    """main() forks the plotting process before the command line is parsed: whether the command line is
    refused, the selection is empty or the report is written, nothing of the session outlives dlrun."""
    fill(dlrun_home)
    env = {**os.environ, **no_model_counts(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "report", "--out", str(tmp_path / "r"), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, out + err
    deadline = time.monotonic() + 60  # a bound on a hang, not an expectation of speed
    while _session_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session_alive(proc.pid) == []
    assert (tmp_path / "r" / "index.html").is_file() is (code == 0)
