"""The command line as a user meets it: shell completion installed and answering, the design card's form,
errors that say where to look, JSON Schemas that validate the built-in catalogs, and what a run prints."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import run_cli

from dlrun.catalog.loader import CatalogLoader

REPO = Path(__file__).resolve().parents[1]
DLRUN = Path(sys.executable).parent / "dlrun"


def test_install_completion_writes_a_bash_completion_that_completes_commands_and_names(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash"}
    # typed in bash, as a user does: typer finds the shell among dlrun's parent processes, whatever ran the tests.
    # `; exit $?` keeps bash as dlrun's parent (bash -c would exec a lone command in its place, and the test then
    # passed only where some ancestor of pytest was a bash: it failed under setsid/nohup, "Shell None")
    proc = subprocess.run(["bash", "-c", f"'{DLRUN}' --install-completion; exit $?"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / ".bash_completions" / "dlrun.sh"
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()

    def complete(*words: str) -> list[str]:
        program = (f"source {script}; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
                   "_dlrun_completion dlrun; printf '%s\\n' \"${COMPREPLY[@]}\"")
        out = subprocess.run(["bash", "-c", program], env={**env, "PATH": f"{DLRUN.parent}:{env['PATH']}"},
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return out.split()

    assert complete("dlrun", "workl") == ["workloads"]
    assert complete("dlrun", "workloads", "sh") == ["show"]
    assert "resnet50" in complete("dlrun", "run", "resn")
    systems = [s["name"] for s in json.loads(run_cli("systems", "list", "--json", check=True).stdout)]
    assert complete("dlrun", "run", "resnet50", "--system", "dgx") == sorted(s for s in systems if s.startswith("dgx"))
    assert len(complete("dlrun", "run", "resnet50", "--system", "dgx")) >= 3


def test_nodes_beyond_the_system_names_the_way_out(dlrun_home):
    proc = run_cli("run", "resnet50", "--nodes", "4", "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "dlrun: error: --nodes 4 exceeds system 'localhost', which has 1 node(s); valid: 1..1, or --system NAME "
        "for a larger system (see dlrun systems list)"]


@pytest.mark.parametrize("kind,folder", [("systems", "recipes/systems"), ("workloads", "recipes/workloads"),
                                         ("images", "containers")])
def test_schema_validates_every_built_in_entry_and_rejects_a_typo(kind, folder):
    proc = run_cli("schema", kind, check=True)
    schema = json.loads(proc.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    validator = jsonschema.Draft202012Validator(schema)
    files = sorted((REPO / folder).glob("*/image.yaml" if kind == "images" else "*.yaml"))
    assert files
    entries = []
    for path in files:
        data = yaml.load(path.read_text(), Loader=CatalogLoader)  # noqa: S506 - a safe loader
        entries += data if isinstance(data, list) else [data]
    for entry in entries:
        errors = list(validator.iter_errors(entry))
        assert errors == [], (entry.get("name"), [e.message for e in errors])
    typo = {**entries[0], "nmae": "x"}
    assert any("nmae" in e.message for e in validator.iter_errors(typo))


def test_schema_of_an_unknown_catalog_is_one_line_with_the_closest_match():
    proc = run_cli("schema", "system")
    assert proc.returncode == 2
    assert proc.stderr == ("dlrun: error: unknown catalog 'system'; did you mean 'systems'? valid: images, "
                           "systems, workloads\n")


def test_a_run_keeps_the_raw_result_line_off_the_terminal_unless_verbose(dlrun_home):
    quiet = run_cli("run", "trivial", "--steps", "2", "--warmup-steps", "1", check=True)
    assert "DLRUN_RESULT" not in quiet.stdout + quiet.stderr
    assert "total images/sec:" in quiet.stdout and "throughput" in quiet.stdout  # rank 0's rows, the summary
    runs = json.loads(run_cli("results", "list", "--json", check=True).stdout)
    assert "DLRUN_RESULT {" in (Path(runs[0]["run_dir"]) / "output.log").read_text()
    verbose = run_cli("run", "trivial", "--steps", "2", "--warmup-steps", "1", "--verbose", check=True)
    assert "DLRUN_RESULT {" in verbose.stdout


QUICK_EXIT = """
import atexit, os, sys, tempfile, threading
from pathlib import Path
from dlrun.cli import app


class Teardown:
    def __del__(self, write=os.write):  # runs when the interpreter tears its modules down, not after os._exit
        write(2, b"torn down\\n")


mark = Teardown()
scratch = tempfile.TemporaryDirectory(prefix="dlrun-quick-exit-")  # removed by an atexit finalizer
print(scratch.name)
atexit.register(lambda: print("atexit ran"))
sys.stdout.write("buffered, no newline")  # still in the buffer when the process leaves
sys.argv = ["dlrun", *sys.argv[1:]]
app.main()
"""


@pytest.mark.parametrize("extra_thread", [False, True])
def test_quick_exit_after_compare_runs_atexit_flushes_and_keeps_the_code(dlrun_home, extra_thread):
    """compare and report leave without the interpreter's teardown: output is flushed, atexit handlers
    (temporary directories among them) run, the exit code stays; with another thread alive the normal exit
    is taken, with the same result."""
    script = QUICK_EXIT
    if extra_thread:
        script = script.replace("app.main()", "stop = threading.Event()\n"
                                "threading.Thread(target=stop.wait, args=(30,), daemon=True).start()\napp.main()")
    from compare_data import add  # a store with two systems to compare
    from dlrun.results.store import Store

    store = Store(dlrun_home / "results.sqlite")
    add(store, [100.0, 101.0, 99.0], system="dgx2", devices=1)
    add(store, [80.0, 81.0, 79.0], system="dgx1v", devices=1)
    proc = subprocess.run([sys.executable, "-c", script, "compare", "--by", "system", "--baseline", "dgx2"],
                          capture_output=True, text=True, timeout=120, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    scratch, rest = proc.stdout.split("\n", 1)
    assert rest.startswith("buffered, no newline") and "dgx1v" in rest and rest.endswith("atexit ran\n")
    assert not Path(scratch).exists()
    assert ("torn down" in proc.stderr) is extra_thread  # quick only where no other thread is left
    # an error leaves the normal way
    bad = subprocess.run([sys.executable, "-c", script, "compare", "--by", "sytem"], capture_output=True,
                         text=True, timeout=120, env=os.environ)
    assert bad.returncode == 2 and "did you mean 'system'" in bad.stderr and bad.stdout.endswith("atexit ran\n")
