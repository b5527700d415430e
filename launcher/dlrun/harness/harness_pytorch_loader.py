"""dlrun PyTorch harness: the loader-only rate - how fast the data source
delivers batches when nothing else runs, measured before the warm-up, so
that a run answers how much of a training step is loading (Ren et al.'s
data-loader sweep) beside the data-stall time the timed steps record.
Standard library + torch; runs on Python >= 3.6 with PyTorch >= 1.0.

With ``--loader-steps K`` (default 10; 0 turns it off) every rank first
takes, untimed, as many batches as its loader can hold ready (DataLoader
workers x 2, PyTorch's prefetch factor, plus one), so that the timed ones
are produced while it waits, then times K batches back to back (on a GPU
up to the batch being on the device).  Synthetic data has no loader: one
fixed batch lives on the device, and the rate is null with that reason.

Its rate over all ranks is the sum of the ranks' rates, which ran at the
same time (the loader_* fields of harness_result_schema.py).
"""

import time

from harness_pytorch_comm import sync


def measure_loader(source, steps, batch, device):
    """This rank's loader-only rate in instances/s, or None with why."""
    if not steps:
        return None, "not measured (--loader-steps 0)"
    if not getattr(source, "loads", False):
        return None, ("synthetic data: one fixed batch on the device, no "
                      "loader to measure")
    for _ in range(getattr(source, "prefetched", 0) + 1):
        source.next()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        source.next()
    sync(device)
    return steps * batch / (time.perf_counter() - start), None


def loader_fields(comm, loader, task):
    rate, why = loader
    instances = task.unit.replace("tokens/sec", "sequences/sec")
    fields = {"loader_rate": None, "per_rank_loader_rate": None,
              "loader_unit": instances, "loader_rate_is": why}
    if rate is None:
        return fields
    rates = [row[0] for row in comm.all_gather([rate])]
    fields.update({
        "loader_rate": sum(rates), "per_rank_loader_rate": rates,
        "loader_rate_is": "batches taken back to back from the data source "
                          "alone after its prefetched ones, every rank at "
                          "once; the sum over ranks"})
    if task.llm:
        fields["loader_tokens_per_sec"] = sum(rates) * task.seq_length
    return fields
