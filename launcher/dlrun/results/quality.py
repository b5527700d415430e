"""Whether a number means anything: the quality verdict of a run and of a compared point, and every
threshold it is judged by (this module owns them; docs/results.md, "Machine identity and quality verdicts",
lists them).

Verdicts, worst first (a run or point gets the worst that applies, and every reason):

  implausible  physically impossible: a scaling efficiency well above 100 % (SUPERLINEAR), a FLOP rate above
               the devices' sourced nominal peak (PEAK_CEILING) or the measured matmul ceiling (CEILING), a bus
               bandwidth above the fabric's line rate (FABRIC_CEILING) or above what the run's detected path
               allows (PEAK_CEILING); the point's judged where it is compared (dlrun.results.compare.verdicts),
               since it needs other runs, the system profile or the stored matmul rate
  emulated     not a hardware figure: the run's code was built for another architecture than the node's CPU
               and ran under emulation (qemu-user through binfmt_misc), as the harness detected (its
               interpreter's ELF machine against the kernel's CPU); it proves an image works, never how fast
               either architecture is, so nothing compares it with a native run or a published number
  contended    other work on the node: other processes used more than CONTENDED_SHARE of a node's CPUs
               during the timed steps (from /proc/stat, less the CPU time of the ranks and their data-loader
               workers), or a rank ran more threads than the CPUs it may use
  straggler    one rank held the others back: in data-parallel training every rank's step takes as long as the
               slowest one's (the gradient all-reduce waits for it), and one rank's median time until it was
               ready to communicate was more than STRAGGLER_RATIO x the median of the other ranks' (the
               harness's `slowest_rank`, dlrun.harness.harness_pytorch_ranktime); the reason names the rank, its host
               and device
  degraded     the hardware ran below its rating: a GPU slowed by its power or thermal limits (NVML clock
               event reasons, in the run's telemetry) for more than THROTTLED_SHARE of the window, or a
               collective's bus bandwidth below BUSBW_FLOOR of what its detected path allows
  short        the timed window was shorter than MIN_WINDOW_S, or had fewer than MIN_STEPS steps
  noisy        the per-step rates spread more than NOISY_SPREAD (1.4826 x the median absolute deviation
               over the median, the robust spread tf_cnn_benchmarks prints as jitter)
  unknown      nothing recorded to judge by: a run that ended without a result, a log of another tool, a
               run stored before dlrun recorded these figures
  ok           none of the above

The harness records the figures (dlrun.harness.harness_common: `quality` in its result); the store keeps a
run's verdict with it (`quality` and `verdict` columns), judged when the run is stored.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A timed window shorter than this (seconds) is `short`: start-up effects and clock steps decide it.
MIN_WINDOW_S = 5.0
#: Fewer timed steps than this are `short`: their spread cannot be judged.
MIN_STEPS = 5
#: A rank whose median time until it was ready to communicate (else its median step) is more than this many
#: times the median of the other ranks' makes the run a `straggler`. Measured on a 2-core machine under a load
#: average of 7-15 (2 DDP ranks of the trivial model, one per core, 30 steps): without a cause 1.00-1.28 (the 1.28
#: on 7 ms steps); with the slowed rank's core shared with 16 busy processes pinned to it 2.7-3.25 (8: 1.48; one
#: busy loop is balanced away on a loaded machine: 1.0-1.1; tests/test_straggler.py). A rank twice as slow as
#: the others, as one busy loop on its core makes it on a quiet machine, is beyond it.
STRAGGLER_RATIO = 1.75
#: Robust relative spread of the per-step rates above which a run is `noisy`.
NOISY_SPREAD = 0.10
#: Share of a node's CPUs that other processes may use during the timed steps before a run is `contended`.
CONTENDED_SHARE = 0.10
#: Scaling efficiency (speedup / ideal speedup) above which a point is `implausible`.
SUPERLINEAR = 1.20
#: Fraction of the devices' nominal peak, or of the stored matmul rate, above which a point is `implausible`.
CEILING = 1.05
#: Fraction of the fabric's line rate (links x Gb/s) a bus bandwidth may reach before it is `implausible`.
FABRIC_CEILING = 1.0
#: Fraction of a sourced peak (the devices' nominal FLOP rate; the bus bandwidth of the detected NVLink, PCIe
#: or RDMA path) above which a number is `implausible`: a peak is the most the hardware can do.
PEAK_CEILING = 1.0
#: Share of the window a GPU may spend slowed by its power or thermal limits before a run is `degraded`.
THROTTLED_SHARE = 0.10
#: Fraction of the detected path's bus bandwidth below which a collective is `degraded` (NCCL reaches 70-90 %
#: of a link's rate on large messages; half of it means the path or the message sizes are not what they seem).
BUSBW_FLOOR = 0.5
#: How long the pre-launch check watches the node (seconds); it warns when other processes use more than
#: CONTENDED_SHARE of its CPUs.
BUSY_SAMPLE_S = 0.5
#: `reproduce --until-stable`: a point is stable when its 95 % interval lies within this fraction of the
#: estimate on either side (half the interval's width over its middle), and repeats stop there.
STABLE_WITHIN = 0.02
#: ... or when a point has this many runs (`--max-repeats`).
MAX_REPEATS = 10

VERDICTS = ("implausible", "emulated", "contended", "straggler", "degraded", "short", "noisy", "unknown", "ok")


def worst(verdicts: Iterable[str]) -> str:
    """The worst of `verdicts` (VERDICTS' order); `ok` for none."""
    found = set(verdicts)
    return next((v for v in VERDICTS if v in found), "ok")


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _host_reasons(hosts: Mapping[str, Any]) -> list[str]:
    reasons = []
    for name, host in sorted(hosts.items()):
        if not isinstance(host, Mapping):
            continue
        share = host.get("others_share")
        if isinstance(share, (int, float)) and share > CONTENDED_SHARE:
            cpus = host.get("node_cpus")
            of = f" ({share * cpus:.1f} of its {cpus} CPUs)" if isinstance(cpus, (int, float)) else ""
            reasons.append(f"contended: other processes used {_pct(share)} of {name}'s CPUs{of} during the timed "
                           f"steps (more than {_pct(CONTENDED_SHARE)})")
        threads, allowed = host.get("threads_per_rank"), host.get("cpus_per_rank")
        if isinstance(threads, (int, float)) and isinstance(allowed, (int, float)) and 0 < allowed < threads:
            reasons.append(f"contended: on {name} a rank ran {threads:g} threads on the {allowed:g} CPU(s) it may "
                           "use")
    return reasons


def judge_inputs(quality: Mapping[str, Any]) -> list[str]:
    """Reasons (each starting with its verdict) from the harness's `quality` record."""
    reasons = _host_reasons(quality.get("hosts") or {})
    window, steps = quality.get("window_s"), quality.get("steps")
    if isinstance(window, (int, float)) and window < MIN_WINDOW_S:
        reasons.append(f"short: the timed window was {window:.3g} s (under {MIN_WINDOW_S:g} s)")
    if isinstance(steps, int) and steps < MIN_STEPS:
        reasons.append(f"short: {steps} timed step(s) (fewer than {MIN_STEPS})")
    spread = quality.get("step_rate_spread")
    if isinstance(spread, (int, float)) and spread > NOISY_SPREAD:
        reasons.append(f"noisy: the per-step rates spread {_pct(spread)} (robust relative spread; more than "
                       f"{_pct(NOISY_SPREAD)})")
    return reasons


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def hardware_reasons(extra: Mapping[str, Any]) -> list[str]:
    """Reasons from what the hardware did: the run's telemetry (`extra.telemetry`, dlrun.telemetry.summary
    .result_fields) and a collective's expected bus bandwidth (`extra.expected_busbw`)."""
    reasons = []
    telemetry = extra.get("telemetry") if isinstance(extra.get("telemetry"), Mapping) else {}
    share, window = telemetry.get("gpu_max_slowed_share"), telemetry.get("window_s")
    if _number(share) and share > THROTTLED_SHARE:
        of = f" of the {window:.3g} s {telemetry.get('window') or 'window'}" if _number(window) else ""
        reasons.append(f"degraded: {str(telemetry.get('gpu_slowed_device'))[:80]} was slowed by its power or "
                       f"thermal limits for {_pct(share)}{of} (more than {_pct(THROTTLED_SHARE)})")
    expected = extra.get("expected_busbw") if isinstance(extra.get("expected_busbw"), Mapping) else {}
    fraction, path = expected.get("fraction"), str(expected.get("path") or "the detected path")[:120]
    if _number(fraction) and _number(expected.get("value")):
        allows = f"{path} allows {expected['value']:g} GB/s"
        if fraction > PEAK_CEILING:
            reasons.append(f"implausible: the bus bandwidth is {_pct(fraction)} of what {allows} (above "
                           f"{_pct(PEAK_CEILING)})")
        elif fraction < BUSBW_FLOOR:
            reasons.append(f"degraded: the bus bandwidth is {_pct(fraction)} of what {allows} (below "
                           f"{_pct(BUSBW_FLOOR)})")
    return reasons


def straggler_reasons(extra: Mapping[str, Any]) -> list[str]:
    """`straggler` where the harness's slowest rank (`extra.slowest_rank`) was more than STRAGGLER_RATIO x the
    median of the other ranks', over at least MIN_STEPS timed steps (the medians of fewer are noise)."""
    slowest = extra.get("slowest_rank") if isinstance(extra.get("slowest_rank"), Mapping) else {}
    ratio, steps = slowest.get("ratio"), (extra.get("quality") or {}).get("steps")
    if not (_number(ratio) and ratio > STRAGGLER_RATIO and _number(slowest.get("rank"))):
        return []
    if not (_number(steps) and steps >= MIN_STEPS):
        return []
    figure = "time until ready to communicate" if slowest.get("figure") == "ready" else "step time"
    return [f"straggler: rank {slowest['rank']:g} on {str(slowest.get('host') or 'an unknown host')[:80]} "
            f"({str(slowest.get('device') or 'unknown device')[:80]}) at {ratio:.2f}× the median step (its "
            f"median {figure} over the other ranks' median; above {STRAGGLER_RATIO:g}×)"]


def emulation_reasons(extra: Mapping[str, Any]) -> list[str]:
    """`emulated` where the harness found its code running for another architecture than the node's."""
    node = extra.get("node") if isinstance(extra.get("node"), Mapping) else {}
    if node.get("emulated") is not True:
        return []
    return [f"emulated: the code ran as {node.get('arch') or 'another architecture'} under emulation on the node's "
            f"{node.get('host_arch') or 'different'} CPU (qemu-user): it shows the image works, not how fast "
            "either machine is"]


def run_quality(status: str | None, results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"verdict", "reasons"} of a stored run from its status and result rows: the harness's figures, and what
    the hardware did (a reason from telemetry or the expected bus bandwidth stands without the harness's)."""
    rows = list(results)
    if status != "ok" or not rows:
        return {"verdict": "unknown", "reasons": ["unknown: no result to judge (the run did not end ok)"]}
    extra = rows[0].get("extra") if isinstance(rows[0].get("extra"), Mapping) else {}
    quality = extra.get("quality")
    if isinstance(quality, Mapping):
        reasons = emulation_reasons(extra) + judge_inputs(quality) + straggler_reasons(extra) + \
            hardware_reasons(extra)
    else:
        reasons = ["unknown: the run recorded no load, window or step spread (a log of another tool, or a run "
                   "stored before dlrun recorded them)"] + hardware_reasons(extra)
    return {"verdict": worst(r.split(":", 1)[0] for r in reasons), "reasons": reasons}


def point_reasons(row: Mapping[str, Any]) -> list[str]:
    """`implausible` reasons of a compared point from its row: scaling efficiency, FLOP rate against the
    peak and the matmul ceiling, bus bandwidth against the fabric."""
    reasons = []
    eff = row.get("scaling_efficiency")
    if isinstance(eff, (int, float)) and eff > SUPERLINEAR:
        reasons.append(f"implausible: scaling efficiency {_pct(eff)} (above {_pct(SUPERLINEAR)})")
    for column, what, limit in (("of_peak", "the devices' nominal peak", PEAK_CEILING),
                                ("of_matmul", "the measured matmul rate", CEILING),
                                ("of_fabric", "the fabric's line rate", FABRIC_CEILING)):
        value = row.get(column)
        if isinstance(value, (int, float)) and value > limit:
            reasons.append(f"implausible: {_pct(value)} of {what} (above {_pct(limit)})")
    return reasons


def summarize_verdicts(verdicts: Iterable[str]) -> dict[str, int]:
    """verdict -> number of runs, worst first."""
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[verdict] = counts.get(verdict, 0) + 1
    return {v: counts[v] for v in VERDICTS if v in counts}


def not_ok_sentence(counts: Mapping[str, int]) -> str:
    """"3 of 12 runs are not ok: 2 contended, 1 short" (or "all 12 runs are ok")."""
    total = sum(counts.values())
    bad = {v: n for v, n in counts.items() if v != "ok"}
    if not bad:
        return f"all {total} run{'s' if total != 1 else ''} are ok"
    listed = ", ".join(f"{n} {v}" for v, n in bad.items())
    return f"{sum(bad.values())} of {total} run{'s' if total != 1 else ''} {'is' if total == 1 else 'are'} not ok: {listed}"


def busy_warning(others_cpus: float | None, cpus: int | None, load: float | None) -> str | None:
    """The pre-launch warning for a node that other processes keep busy, or None."""
    if others_cpus is None or not cpus:
        return None
    share = others_cpus / cpus
    if share <= CONTENDED_SHARE:
        return None
    load_text = f"; load average {load:.2f}" if load is not None else ""
    return (f"this node is busy: other processes use {others_cpus:.1f} of its {cpus} CPUs ({_pct(share)}{load_text}); "
            "the run's numbers will be contended")
