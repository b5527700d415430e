"""Defaults chosen by measurement, per machine: `dlrun tune` and the automatic tuning before a run.

The speed knobs of the PyTorch harness (allocator, fused optimizer step, channels-last, threads per rank and
their pinning, torch.compile, cuDNN's algorithm search) are measured on short runs of the workload on this
machine (`search`, `trial`), the fastest kept and stored with the machine's fingerprint (`fingerprint`,
`decisions`), and applied to every later run of the same configuration whose knobs were left at auto
(`apply`). A run records each knob's value and why (asked for, tuned, default); knobs never enter the
comparability key.
"""
from dlrun.tune.apply import apply_decision, measure, tuned_plan, with_sources
from dlrun.tune.machine_key import fingerprint_id, machine_fingerprint

__all__ = ["apply_decision", "fingerprint_id", "machine_fingerprint", "measure", "tuned_plan", "with_sources"]
