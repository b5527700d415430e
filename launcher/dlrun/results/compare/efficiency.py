"""Efficiency columns: how much of the machine a result used.

Training: achieved FLOP rate = training FLOP per sample x samples/s, where training FLOP per sample =
3 x 2 x the forward multiply-adds of the model's convolutions and fully connected layers (forward once,
backward twice: gradients of the data and of the weights; 2 FLOP per multiply-add). Element-wise work
(batch norm, activations, the optimizer step) is not counted, as in Ren et al.'s Table II "ops/ins" and
in `bench/efficiency.py`. That rate is given as a fraction of
  - the nominal peak of the devices the run used, at the run's precision, from the system profile
    (per GPU x devices; for a CPU system per socket x sockets x nodes), and
  - the newest matrix-multiply rate stored for that system and precision (`dlrun measure matmul`): per GPU
    x devices, or per node x nodes on a CPU system, where the measurement used the whole node.
Communication: bus bandwidth as a fraction of what the fabric carries per node, links x line rate / 8
(GB/s); on one node no traffic crosses the fabric and the fraction is n/a.
Whatever is not known is None here and `unknown` on the terminal, never a guess.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlrun.harness.harness_contract import split_precision_label
from dlrun.results.key import UNKNOWN

#: Training FLOP per forward multiply-add (see the module notes).
TRAIN_FLOP_PER_FORWARD_MAC = 6
COLUMNS_TRAINING = ["train_gflop_per_sample", "achieved_gflops", "peak_gflops", "of_peak", "matmul_gflops",
                    "of_matmul"]
COLUMNS_COMMUNICATION = ["fabric_gbs", "of_fabric"]


@dataclass(frozen=True)
class Peak:
    tflops: float       # per GPU, or per CPU socket
    precision: str      # the precision the peak is quoted at (fp32, fp16-tensor, ...)
    source: str


@dataclass(frozen=True)
class SystemFacts:
    """What efficiency needs of a system profile."""

    name: str
    gpus_per_node: int                                   # 0: a CPU system
    sockets: int
    peaks: Mapping[str, Peak] = field(default_factory=dict)   # run precision (fp32, amp) -> peak
    fabrics: Mapping[str, tuple[int | None, float | None]] = field(default_factory=dict)  # links, Gb/s


@dataclass(frozen=True)
class ModelFlops:
    forward_macs: float  # per sample
    source: str

    @property
    def train_flop(self) -> float:
        return TRAIN_FLOP_PER_FORWARD_MAC * self.forward_macs


@dataclass
class EfficiencyInputs:
    systems: Mapping[str, SystemFacts] = field(default_factory=dict)
    models: Mapping[str, ModelFlops] = field(default_factory=dict)
    #: (system, run precision) -> the newest stored matmul measurement, or None
    matmul: Callable[[str, str], dict[str, Any] | None] = lambda system, precision: None


def system_facts(spec: Any) -> SystemFacts:
    """Facts from a catalog SystemSpec. Peak rates are optional in system profiles: `gpus.peak` (per GPU)
    and `cpu.peak` (per socket), lists of {precision, tflops, source}, with the catalog's `peak_for`
    choosing the one a run precision counts against; fabrics give `speed_gbps` per link and `links`."""
    from dlrun.catalog import models as catalog  # catalog sits above results; imported late for start-up time

    gpus = spec.gpus
    peaks: dict[str, Peak] = {}
    rates = getattr(gpus if gpus else spec.cpu, "peak", None)
    choose = getattr(catalog, "peak_for", None)
    if rates and choose:
        for precision in catalog.RUN_PRECISION_PEAKS:
            rate = choose(list(rates), precision)
            if rate is not None:
                where = f", {rate.source.where}" if getattr(rate.source, "where", "") else ""
                peaks[precision] = Peak(rate.tflops, rate.precision, f"{rate.source.doc}{where}")
    fabrics = {name: (getattr(cfg, "links", None), cfg.speed_gbps) for name, cfg in spec.fabric_config.items()}
    return SystemFacts(spec.name, spec.gpus_per_node, spec.cpu.sockets, peaks, fabrics)


def run_precision(key_precision: Any) -> str:
    """`amp(bfloat16)` -> `amp`: the precision a run was asked for."""
    return split_precision_label(key_precision)[0]


def columns_for(metric: str) -> list[str]:
    """The efficiency columns of a rate; none for samples per joule (FLOP/s of peak are of throughput)."""
    if metric == "samples_per_joule":
        return []
    return COLUMNS_COMMUNICATION if metric == "busbw" else COLUMNS_TRAINING


def efficiency(key: Mapping[str, Any], metric: str, rate: float, inputs: EfficiencyInputs,
               notes: set[str]) -> dict[str, Any]:
    """The efficiency columns for a mean `rate` (samples/s, or GB/s of bus bandwidth) of runs with `key`;
    why a column is unknown goes into `notes`."""
    system = inputs.systems.get(key.get("system"))
    if not columns_for(metric):
        return {}
    if metric == "busbw":
        return _communication(key, rate, system, notes)
    out: dict[str, Any] = dict.fromkeys(COLUMNS_TRAINING)
    model = inputs.models.get(key.get("model"))
    if model is None:
        notes.add(f"FLOP per sample of model {key.get('model')} unknown: no count for it")
        return out
    achieved = model.train_flop * rate / 1e9
    notes.add(f"training FLOP per sample of {key.get('model')}: {TRAIN_FLOP_PER_FORWARD_MAC} x "
              f"{model.forward_macs / 1e9:.4g} G forward multiply-adds ({model.source})")
    out["train_gflop_per_sample"] = model.train_flop / 1e9
    out["achieved_gflops"] = achieved
    devices, nodes = key.get("devices"), key.get("nodes")
    if system is None:
        notes.add(f"system {key.get('system')} has no profile: peak unknown")
    else:
        peak = system.peaks.get(run_precision(key.get("precision")))
        if peak is None:
            notes.add(f"nominal peak of {system.name} at {key.get('precision')} unknown: not in its profile")
        else:
            count = devices if system.gpus_per_node else (nodes * system.sockets if isinstance(nodes, int) else None)
            if isinstance(count, int):
                out["peak_gflops"] = peak.tflops * 1e3 * count
                out["of_peak"] = achieved / out["peak_gflops"]
                notes.add(f"peak of {system.name}: {peak.tflops:g} TFLOP/s {peak.precision} per "
                          f"{'GPU' if system.gpus_per_node else 'socket'} ({peak.source})")
    measured = inputs.matmul(key.get("system"), run_precision(key.get("precision")))
    if measured is None:
        notes.add(f"no matmul rate stored for {key.get('system')} at {run_precision(key.get('precision'))} "
                  "(dlrun measure matmul)")
    else:
        gpu = measured.get("data", {}).get("device") == "cuda"
        count = devices if gpu else nodes
        if isinstance(count, int):
            out["matmul_gflops"] = measured["gflops"] * count
            out["of_matmul"] = achieved / out["matmul_gflops"]
            notes.add(f"matmul of {key.get('system')}: {measured['gflops']:.1f} GFLOP/s per "
                      f"{'GPU' if gpu else 'node'} (run {measured['run_id']}, {measured['created_at']})")
    return out


def _communication(key: Mapping[str, Any], busbw: float, system: SystemFacts | None,
                   notes: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(COLUMNS_COMMUNICATION)
    fabric = key.get("fabric")
    if key.get("nodes") == 1:
        out["of_fabric"] = "n/a"
        notes.add("one node: no traffic crosses the fabric, so no fabric fraction")
        return out
    if system is None or fabric in (None, UNKNOWN):
        notes.add(f"fabric capacity of {key.get('system')} unknown")
        return out
    links, gbps = system.fabrics.get(fabric, (None, None))
    if not links or not gbps:
        notes.add(f"fabric {fabric} of {system.name}: links or line rate not in its profile")
        return out
    out["fabric_gbs"] = links * gbps / 8
    out["of_fabric"] = busbw / out["fabric_gbs"]
    notes.add(f"fabric {fabric} of {system.name}: {links} x {gbps:g} Gb/s = {out['fabric_gbs']:g} GB/s per node")
    return out
