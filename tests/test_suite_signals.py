"""The suite's Ctrl-C tests need the SIGINT a terminal gives: when a non-interactive shell starts the suite in
the background (`make test &` in a CI script), the shell hands it SIGINT ignored, and without conftest's reset
every dlrun process the tests start would ignore the Ctrl-C they send (two tests then waited out their time
limits on 2026-11-27)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

PROBE = '''
import signal, subprocess, sys

def test_a_child_process_gets_keyboardinterrupt_on_sigint():
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
'''


def test_a_suite_started_in_the_background_still_gives_its_children_ctrl_c(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", str(probe)]
    # A non-interactive shell's background job: SIGINT and SIGQUIT ignored, as in the failing runs.
    script = f"{shlex.join(pytest_cmd)} & wait $!"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
