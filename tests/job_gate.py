"""A gate that holds the Python processes of dlrun's jobs at their start until the test lets them through, so
that a test interrupting a run in the middle makes that state rather than hoping the machine is slow enough.

The gate is a `sitecustomize` module on the PYTHONPATH handed to dlrun (which hands its environment on to the
job and mpirun to its ranks). In a rank of a run (dlrun's harness, with DLRUN_RUN_DIR set) it claims a token for
the run before anything else runs: a file of `tokens/` renamed to `claimed/RUN` (a rename is atomic, so two
ranks never take two tokens; the second rank of a run finds `claimed/RUN` and passes). Without a token it
writes `held/RUN` and waits until the test adds one. Every other Python process (dlrun, a stand-in sbatch)
passes at once.
The job is real, unchanged, and ends on signals as it would: the gate is plain Python waiting in a loop.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

SITECUSTOMIZE = '''\
import os as _os, sys as _sys, time as _time
_run, _gate = _os.environ.get("DLRUN_RUN_DIR"), _os.environ.get("DLRUN_TEST_GATE")
if _run and _gate and _os.path.basename((_sys.argv or [""])[0]).startswith("harness_"):
    _name = _os.path.basename(_run.rstrip("/"))
    _claimed = _os.path.join(_gate, "claimed", _name)
    while not _os.path.exists(_claimed):
        for _token in sorted(_os.listdir(_os.path.join(_gate, "tokens"))):
            try:
                _os.rename(_os.path.join(_gate, "tokens", _token), _claimed)
                break
            except OSError:
                continue
        else:
            open(_os.path.join(_gate, "held", _name), "a").close()
            _time.sleep(0.05)
'''


class JobGate:
    """Lets `tokens` runs start, holds the ones after them (see the module's docstring)."""

    def __init__(self, root: Path, tokens: int):
        self.root = root
        for sub in ("site", "tokens", "claimed", "held"):
            (root / sub).mkdir(parents=True)
        (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self._issued = 0
        self.allow(tokens)

    def env(self) -> dict[str, str]:
        """The environment that puts dlrun's jobs behind the gate."""
        path = [str(self.root / "site"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        return {"PYTHONPATH": os.pathsep.join(path), "DLRUN_TEST_GATE": str(self.root)}

    def allow(self, runs: int) -> None:
        """Let `runs` more runs start."""
        for _ in range(runs):
            (self.root / "tokens" / f"{self._issued:04d}").touch()
            self._issued += 1

    def held(self) -> list[str]:
        """Names of the run directories whose processes wait at the gate now."""
        claimed = {path.name for path in (self.root / "claimed").iterdir()}
        return sorted(path.name for path in (self.root / "held").iterdir() if path.name not in claimed)

    def passed(self) -> list[str]:
        """Names of the run directories that went through."""
        return sorted(path.name for path in (self.root / "claimed").iterdir())


def wait_until(predicate, what: str, within: float = 300.0, poll: float = 0.1) -> None:
    """Wait until `predicate()` holds. `within` bounds a hang; it is no expectation of speed."""
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not after {within:.0f} s"
        time.sleep(poll)
