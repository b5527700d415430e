"""Defaults chosen by measurement, per machine: `dlrun tune` and the automatic tuning before a run.

The speed knobs of the PyTorch harness (allocator, fused optimizer step, channels-last, threads per rank and
their pinning, torch.compile, cuDNN's algorithm search) are measured on short runs of the workload on this
machine (`search`, `trial`), the fastest kept and stored with the machine's fingerprint (`fingerprint`,
`decisions`), and applied to every later run of the same configuration whose knobs were left at auto
(`apply`, through dlrun.plan.finish). A run records each knob's value and why (asked for, tuned, default); the
knobs that change which code computes a step enter the comparability key as its code path, however they were
chosen (dlrun.results.key).
"""
from dlrun.tune.apply import decide, knob_decision, measure
from dlrun.tune.machine_key import fingerprint_id, machine_fingerprint

__all__ = ["decide", "fingerprint_id", "knob_decision", "machine_fingerprint", "measure"]
