"""The machine a tuning decision belongs to: the run record's hardware fingerprint, plus what decides the
fastest knobs beyond it.

A decision (which allocator, whether to fuse the optimizer step, ...) holds for the hardware it was measured on.
Its fingerprint is the one a run records (`dlrun.results.fingerprint`: CPU model, sockets x cores, memory,
GPUs and driver), with the instruction-set extensions (which kernels oneDNN, MKL and ATen pick: two
processors both named "AMD EPYC" may differ in AVX-512 and bf16), the usable logical CPUs (threads and their
pinning) and the architecture. Any change gives another fingerprint, and the tuner measures again.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dlrun.results.fingerprint import fingerprint_of


def machine_fingerprint(inventory: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the fastest knobs on this node, from its inventory (`dlrun.preflight.node_inventory()`)."""
    cpu = inventory.get("cpu") if isinstance(inventory.get("cpu"), Mapping) else {}
    machine = fingerprint_of(result=None, inventory=inventory)  # as a run on this node records it
    machine.pop("node_from", None)  # where the record came from, not what the hardware is
    return {**machine, "arch": inventory.get("arch"),
            "isa": sorted(str(flag) for flag in cpu.get("isa_flags") or []),
            "usable_cpus": cpu.get("usable_cpus")}


def fingerprint_id(fingerprint: Mapping[str, Any]) -> str:
    """16 hex digits of the fingerprint's canonical JSON: equal hardware, equal id."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe(fingerprint: Mapping[str, Any]) -> str:
    """One line for people: `AMD EPYC, 1 x 2 cores (2 CPUs), 24 GiB, avx512_bf16 amx...: no GPU`."""
    isa = [f for f in fingerprint.get("isa") or [] if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16",
                                                            "amx_tile", "sve", "bf16", "asimd")]
    gpu = fingerprint.get("gpu")
    gpus = f"{fingerprint.get('gpu_count') or '?'} x {gpu}" if gpu else "no GPU"
    return (f"{fingerprint.get('cpu') or 'unknown CPU'}, {fingerprint.get('sockets') or '?'} x "
            f"{fingerprint.get('cores_per_socket') or '?'} cores ({fingerprint.get('usable_cpus') or '?'} usable "
            f"CPUs), {fingerprint.get('memory_gib') or '?'} GiB, {' '.join(isa) or 'no vector flags'}; {gpus}")
