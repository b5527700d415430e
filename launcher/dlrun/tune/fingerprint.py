"""The machine a tuning decision belongs to: its hardware fingerprint, computed in this one place.

A decision (which allocator, whether to fuse the optimizer step, ...) holds for the hardware it was measured on:
CPU model and instruction-set extensions (which kernels oneDNN, MKL and ATen pick), sockets, cores and logical
CPUs (threads and their pinning), memory, and the GPUs. Any change gives another fingerprint, and the tuner
measures again. The run record carries a fingerprint of its own (the comparability key's machine fields);
`machine_fingerprint` can be replaced by that one once it holds the instruction-set extensions too.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def machine_fingerprint(inventory: Mapping[str, Any]) -> dict[str, Any]:
    """What decides the fastest knobs on this node, from its inventory (`dlrun.preflight.node_inventory()`)."""
    cpu = inventory.get("cpu") if isinstance(inventory.get("cpu"), Mapping) else {}
    gpu = inventory.get("gpu") if isinstance(inventory.get("gpu"), Mapping) else {}
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, Mapping)]
    memory = inventory.get("memory_gb")
    return {
        "arch": inventory.get("arch"),
        "cpu": cpu.get("model"),
        "isa": sorted(str(flag) for flag in cpu.get("isa_flags") or []),
        "sockets": cpu.get("sockets"),
        "physical_cores": cpu.get("physical_cores"),
        "logical_cpus": cpu.get("logical_cpus"),
        "usable_cpus": cpu.get("usable_cpus"),
        # whole GiB: the kernel's MemTotal moves by a few MiB between boots of one machine
        "memory_gib": round(memory) if isinstance(memory, (int, float)) else None,
        "gpus": sorted(f"{g.get('name')} {_mib(g.get('memory_mib'))}".strip() for g in gpus),
    }


def _mib(value: Any) -> str:
    return f"{int(value)} MiB" if isinstance(value, (int, float)) and value > 0 else ""


def fingerprint_id(fingerprint: Mapping[str, Any]) -> str:
    """16 hex digits of the fingerprint's canonical JSON: equal hardware, equal id."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe(fingerprint: Mapping[str, Any]) -> str:
    """One line for people: `AMD EPYC, 1 x 2 cores (2 CPUs), 24 GiB, avx512_bf16 amx...: no GPU`."""
    isa = [f for f in fingerprint.get("isa") or [] if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16",
                                                            "amx_tile", "sve", "bf16", "asimd")]
    gpus = ", ".join(fingerprint.get("gpus") or []) or "no GPU"
    return (f"{fingerprint.get('cpu') or 'unknown CPU'}, {fingerprint.get('sockets') or '?'} socket(s), "
            f"{fingerprint.get('physical_cores') or '?'} cores ({fingerprint.get('usable_cpus') or '?'} usable "
            f"CPUs), {fingerprint.get('memory_gib') or '?'} GiB, {' '.join(isa) or 'no vector flags'}; {gpus}")
