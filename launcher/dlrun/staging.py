"""`--stage-data`: the dataset copied to node-local storage before the ranks start, once per node.

The copy lives at `/tmp/dlrun-stage-<key>` on every node of the job, where the key is a digest of the
dataset's path (a copy another user made there is refused, not used), so that the path is known when the
job is rendered (the /data bind points at it) and runs of the same dataset on a node share one copy. The
copy is made by `STAGE_SCRIPT`, which every scheduler runs once per node before the launch (local: in the
script; Slurm: an `srun --ntasks-per-node=1` step; PBS: `pbsdsh -u`; LSF: `jsrun`, one resource set per
host). It holds a lock while it works, so that concurrent runs on a node
never see half a copy, and copies again unless the copy's recorded fingerprint (every file's name, size and
modification time) is the dataset's. Each node writes what it did (bytes, files, seconds, whether an
earlier copy was reused) to `stage/<host>.json` in the run directory; dlrun stores those with the run.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dlrun.shell import Expand

STAGE_ROOT = "/tmp"
RECORDS_DIR = "stage"  # in the run directory: one JSON file per node

STAGE_SCRIPT = r"""set -euo pipefail
src=$1 dest=$2 out=$3
host=$(hostname)
mkdir -p "$out" "$(dirname "$dest")"
if [ -e "$dest.lock" ] && [ ! -O "$dest.lock" ]; then
  echo "dlrun: $dest.lock belongs to another user; remove it or stage elsewhere" >&2
  exit 1
fi
exec 9>"$dest.lock"
flock 9
start=$(date +%s.%N)
fingerprint=$(cd "$src" && find -L . -type f -printf '%P %s %T@\n' | LC_ALL=C sort | sha256sum | cut -c1-64)
if [ -d "$dest" ] && [ "$(cat "$dest.done" 2>/dev/null || true)" = "$fingerprint" ]; then
  reused=true
else
  reused=false
  rm -rf "$dest" "$dest.part" "$dest.done"
  mkdir -p "$dest.part"
  cp -RL "$src/." "$dest.part/"
  mv "$dest.part" "$dest"
  printf '%s\n' "$fingerprint" > "$dest.done"
fi
end=$(date +%s.%N)
bytes=$(find "$dest" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", s}')
files=$(find "$dest" -type f | wc -l)
seconds=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}')
printf '{"host": "%s", "bytes": %s, "files": %s, "seconds": %s, "reused": %s}\n' \
  "$host" "$bytes" "$files" "$seconds" "$reused" > "$out/$host.json"
echo "dlrun: staged $bytes bytes ($files files) on $host in $seconds s (reused: $reused)"
"""


def staged_path(source: str) -> str:
    """Where a node keeps its copy of the dataset at `source` (an absolute path)."""
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    return f"{STAGE_ROOT}/dlrun-stage-{key}"


def stage_argv(source: str, dest: str) -> list[str]:
    """The command that stages the dataset on one node (run once on each node of the job)."""
    return ["bash", "-c", STAGE_SCRIPT, "dlrun-stage", source, dest, Expand(f"${{DLRUN_RUN_DIR}}/{RECORDS_DIR}")]


def stage_records(run_path: Path) -> list[dict[str, Any]]:
    """What each node's staging step recorded, by host name."""
    records = []
    for path in sorted((run_path / RECORDS_DIR).glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def stage_summary(source: str, dest: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The staging of a run in one record: one node's bytes, the bytes copied over all nodes (a reused copy
    copies none), the slowest node's seconds."""
    return {"source": source, "path": dest, "nodes": len(records),
            "bytes": max((int(r.get("bytes", 0)) for r in records), default=0),  # one node's copy
            "bytes_copied": sum(int(r.get("bytes", 0)) for r in records if not r.get("reused")),
            "seconds": max((float(r.get("seconds", 0)) for r in records), default=None),
            "reused": bool(records) and all(r.get("reused") for r in records), "per_node": records}
