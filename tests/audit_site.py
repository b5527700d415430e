"""The site workloads of a hostile audit of secrets and process lifetimes (`~/.config/dlrun/workloads/audit.yaml`),
made in a test's own config directory, and a search for planted values through everything dlrun wrote.

`fast`, `sleeper`, `leakysleep`, `rankleak` and `dribble` are the audit's own. `leakyforms` prints secrets in every
common form (plain, JSON-escaped, percent-encoded, shell-quoted, a URL and its password) on stdout and stderr and
into files of its run directory, then says READY and sleeps; `printforms` does the same and ends. The `tree-*`
workloads build process trees that record their pids in $AUDIT_PIDS and then wait: a grandchild that ignores
SIGTERM, a double-forked daemon in a session of its own that dropped the run directory from its environment, a
stopped process."""
from __future__ import annotations

import gzip
import os
import sqlite3
import textwrap
from pathlib import Path

AUDIT_YAML = r"""
- {name: fast, kind: command, description: a result at once, result: {format: dlrun-result},
   command: 'echo "DLRUN_RESULT {\"metric\": \"throughput\", \"value\": 5, \"unit\": \"images/sec\"}"'}
- {name: sleeper, kind: command, description: sleeps, result: {format: dlrun-result},
   command: 'echo started; sleep 600'}
- {name: leakysleep, kind: command, description: prints a secret then sleeps, result: {format: dlrun-result},
   command: 'echo "leak: $HF_TOKEN"; echo "leak: $HF_TOKEN" > leaked-file.txt; sleep 120'}
- {name: rankleak, kind: command, description: every rank prints the token, result: {format: dlrun-result},
   command: 'echo "rank $DLRUN_RANK sees $HF_TOKEN $SHORT_TOKEN $DB_URL"; if [ "$DLRUN_RANK" = 0 ]; then echo "DLRUN_RESULT {\"metric\": \"throughput\", \"value\": 1, \"unit\": \"images/sec\"}"; fi'}
- {name: dribble, kind: command, description: prints a secret JSON-escaped, result: {format: dlrun-result},
   command: 'python3 -c "import json,os; print(json.dumps({\"t\": os.environ[\"API_KEY\"]}))"'}
"""

LEAK = """\
import json, os, shlex, subprocess, sys
from urllib.parse import quote
api, url, token = os.environ["API_KEY"], os.environ["DB_URL"], os.environ["HF_TOKEN"]
password = url.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[1]
quoted = subprocess.run(["bash", "-c", 'printf "%q" "$API_KEY"'], capture_output=True, text=True).stdout
text = "\\n".join(["plain " + api, "json " + json.dumps({"t": api}), "url " + quote(api, safe=""),
                   "shell " + shlex.quote(api), "printf-q " + quoted, "dburl " + url, "dbpass " + password,
                   "dbpass-url " + quote(password, safe=""), "token " + token]) + "\\n"
sys.stdout.write(text)
sys.stderr.write(text)
open("leaked-file.txt", "w").write(text)
os.makedirs("out/deeper", exist_ok=True)
open("out/deeper/environ.json", "w").write(json.dumps(dict(os.environ)))
"""

#: tree name -> (shell script, how many pids it records)
TREES = {
    "grandchild-ignoring-sigterm": ("""\
        sh -c 'echo $$ >> "$AUDIT_PIDS"; trap "" TERM; exec sleep 600' &
        echo $$ >> "$AUDIT_PIDS"
        wait
        """, 2),
    "detached-daemon": ("""\
        (setsid sh -c 'echo $$ >> "$AUDIT_PIDS"; trap "" TERM HUP; exec env -u DLRUN_RUN_DIR sleep 600' &)
        sh -c 'trap "" TERM; echo $$ >> "$AUDIT_PIDS"; while :; do sleep 1; done' &
        echo $$ >> "$AUDIT_PIDS"
        wait
        """, 3),
    "stopped-process": ("""\
        sh -c 'echo $$ >> "$AUDIT_PIDS"; kill -STOP $$; exec sleep 600' &
        echo $$ >> "$AUDIT_PIDS"
        wait
        """, 2),
}


def install(config_home: Path, scripts: Path) -> None:
    """The audit's workloads in `config_home`/dlrun/workloads/audit.yaml, with their scripts in `scripts`."""
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "leak.py").write_text(LEAK)
    entries = [AUDIT_YAML.strip()]
    entries.append("- {name: leakyforms, kind: command, description: prints secrets in every form then sleeps, "
                   "result: {format: dlrun-result}, command: 'python3 %s && echo READY && sleep 120'}"
                   % (scripts / "leak.py"))
    entries.append("- {name: printforms, kind: command, description: prints secrets in every form, "
                   "result: {format: dlrun-result}, command: 'python3 %s'}" % (scripts / "leak.py"))
    for name, (script, _) in TREES.items():
        path = scripts / f"{name}.sh"
        path.write_text(textwrap.dedent(script))
        entries.append(f"- {{name: tree-{name}, kind: command, description: a process tree, "
                       f"result: {{format: dlrun-result}}, command: 'bash {path}'}}")
    workloads = config_home / "dlrun" / "workloads"
    workloads.mkdir(parents=True, exist_ok=True)
    (workloads / "audit.yaml").write_text("\n".join(entries) + "\n")


def _contents(path: Path) -> list[bytes]:
    """What a file holds, as stored and as a reader sees it (a bundle unpacked, a store's rows dumped)."""
    data = path.read_bytes()
    out = [data]
    if data[:2] == b"\x1f\x8b":
        out.append(gzip.decompress(data))
    if data[:16] == b"SQLite format 3\x00":
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as store:
            out.append("\n".join(store.iterdump()).encode())
    return out


def found_anywhere(roots: list[Path], needles: dict[str, str], texts: list[str] = ()) -> list[str]:
    """`what in where` for every needle found in a file under `roots` (every file: run directories, the
    store, its WAL, bundles unpacked, exports) or in `texts` (what dlrun printed)."""
    found = []
    files = [p for root in roots for p in ([root] if root.is_file() else sorted(root.rglob("*")))
             if p.is_file() and not p.is_symlink()]
    for name, needle in needles.items():
        raw = needle.encode()
        found += [f"{name} in {path}" for path in files if any(raw in data for data in _contents(path))]
        found += [f"{name} in printed text {i}" for i, text in enumerate(texts) if needle in text]
    return found


def alive(pids: list[int]) -> list[int]:
    """The pids that are still processes (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            out.append(pid)
    return out


def run_dir_processes(run_dir: Path) -> list[int]:
    """Live processes whose environment carries the run directory."""
    entry = f"DLRUN_RUN_DIR={run_dir}".encode()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if entry in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    out.append(int(name))
            except OSError:
                continue
    return alive(out)
