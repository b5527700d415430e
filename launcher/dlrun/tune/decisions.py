"""Where the tuner's decisions live: `$DLRUN_HOME/tuning.json`, beside the result store, one entry per machine
fingerprint and run configuration.

    {"version": 1, "decisions": [{"fingerprint_id": "…", "fingerprint": {…}, "config_id": "…", "config": {…},
      "decided_at": "2026-11-27T10:00:00Z", "knobs": {"fused_optimizer": {"value": "off", "speedup": 1.07,
      "measured": true}, …}, "not_measured": {"compile": "…"}, "seconds": 21.4, "load_average": [0.2, …]}]}

The file is data read back from disk: its size is bounded, each entry is checked (known knobs, valid values)
before a run uses it, and a file that cannot be read is set aside, never trusted half. Writes are atomic
(the newest decision per fingerprint and configuration wins; the oldest entries go beyond MAX_DECISIONS).
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dlrun.files import write_json
from dlrun.paths import dlrun_home, private_dir
from dlrun.plan import Plan
from dlrun.tune.machine_key import fingerprint_id

FILE_NAME = "tuning.json"
#: The largest file read (bytes) and the most decisions kept.
MAX_BYTES = 4 << 20
MAX_DECISIONS = 256
#: Valid values of each knob in a stored decision.
VALUES: dict[str, tuple[str, ...]] = {
    "allocator": ("tcmalloc", "jemalloc", "glibc-tuned", "system"), "fused_optimizer": ("on", "off"),
    "fused_bn_relu": ("on", "off"),
    "channels_last": ("on", "off"), "pin_threads": ("on", "off"), "compile": ("on", "off"),
    "cudnn_benchmark": ("on", "off"),
}


def decisions_path() -> Path:
    return dlrun_home() / FILE_NAME


def run_config(plan: Plan, framework_version: str | None = None) -> dict[str, Any]:
    """What a decision depends on besides the machine: the model and its batch, the precision, the layout
    of ranks and threads, and the software (image, its digest, the framework version that runs)."""
    return {"workload": plan.workload.name, "model": plan.workload.model, "precision": plan.precision,
            "batch_size": plan.batch_size, "ranks_per_node": plan.ranks_per_node,
            "threads_per_rank": plan.threads_per_rank, "device": plan.device, "image": plan.image.name,
            "image_digest": plan.image.digest, "framework_version": framework_version}


def config_id(config: Mapping[str, Any]) -> str:
    return fingerprint_id(config)


def load(path: Path | None = None) -> list[dict[str, Any]]:
    """The stored decisions; [] when there are none or the file is unreadable, too large or not ours."""
    path = path or decisions_path()
    try:
        if path.stat().st_size > MAX_BYTES:
            return []
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    items = data.get("decisions") if isinstance(data, dict) else None
    return [d for d in items if isinstance(d, dict)] if isinstance(items, list) else []


def lookup(fp_id: str, cfg_id: str, path: Path | None = None) -> dict[str, Any] | None:
    """The newest decision for this machine and configuration, its knobs checked; None when there is none."""
    found = [d for d in load(path) if d.get("fingerprint_id") == fp_id and d.get("config_id") == cfg_id]
    if not found:
        return None
    decision = max(found, key=lambda d: str(d.get("decided_at", "")))
    return {**decision, "knobs": checked_knobs(decision.get("knobs"))}


def checked_knobs(knobs: Any) -> dict[str, dict[str, Any]]:
    """The knobs of a stored decision whose value is valid; everything else is dropped."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(knobs, Mapping):
        return out
    for name, entry in knobs.items():
        value = entry.get("value") if isinstance(entry, Mapping) else None
        valid = (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096) \
            if name == "threads" else value in VALUES.get(str(name), ())
        if valid:
            out[str(name)] = {"value": value, **{k: entry[k] for k in ("speedup", "measured", "note")
                                                 if k in entry and isinstance(entry[k], (int, float, str, bool))}}
    return out


def save(decision: dict[str, Any], path: Path | None = None) -> Path:
    """Add `decision` (replacing an older one for the same machine and configuration)."""
    path = path or decisions_path()
    private_dir(path.parent)
    keep = [d for d in load(path) if (d.get("fingerprint_id"), d.get("config_id"))
            != (decision["fingerprint_id"], decision["config_id"])]
    keep.append(decision)
    keep.sort(key=lambda d: str(d.get("decided_at", "")))
    write_json(path, {"version": 1, "decisions": keep[-MAX_DECISIONS:]})
    return path


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
