"""Bring-your-own workloads (`kind: command`): a site's own program run under dlrun's plan, and how its
result is read.

The `command` is shell text from the site's catalog (trusted as the site's own configuration, as a batch
script is), run by bash inside the image once per rank (`run_per: rank`) or once per node (`run_per: node`:
only local rank 0 runs it, the node's other ranks exit 0). It sees the plan as environment variables,
documented in COMMAND_VARIABLES, and names its result one of three ways (`result`):

  format: dlrun-result     one `DLRUN_RESULT {json}` line ({"metric", "value", "unit", ...}, the harness's own)
  format: PARSER           one of dlrun's parsers by name (nccl-tests, tf_cnn_benchmarks, horovod, dllogger,
                           mlperf, torchtitan, megatron-lm, nemo, osu, fio)
  format: regex            `regex` with one group, the figure of merit; its `metric`, `unit` and `direction`
                           (higher or lower is better) are declared, the last matching line is the value
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlrun.harness.harness_contract import rank_variables

#: The result formats a command may name: dlrun's parsers (dlrun.results.parsers.FORMATS, under their names
#: or the names users know them by) and `regex`.
PARSER_FORMATS = {"dlrun-result": "dlrun-harness", "nccl-tests": "nccl-tests", "tf_cnn_benchmarks": "tf_cnn_benchmarks",
                  "horovod": "horovod", "dllogger": "dllogger", "mlperf": "mllog", "torchtitan": "torchtitan",
                  "megatron-lm": "megatron-lm", "nemo": "nemo", "osu": "osu", "fio": "fio"}
ResultFormat = Literal["dlrun-result", "nccl-tests", "tf_cnn_benchmarks", "horovod", "dllogger", "mlperf",
                       "torchtitan", "megatron-lm", "nemo", "osu", "fio", "regex"]
#: What a declared figure of merit may be, with the unit it is given in and which way is better (as
#: dlrun.results.parsers.result.METRICS and UNITS hold them; tests/test_byo.py checks that they agree).
FigureMetric = Literal["throughput", "bandwidth", "latency", "busbw", "read_bandwidth", "file_read_rate"]
FigureUnit = Literal["images/sec", "sequences/sec", "samples/sec", "tokens/sec", "GB/s", "us", "files/s"]
#: The direction each metric is better in: a latency is better when lower, every rate when higher.
BETTER = {"throughput": "higher", "bandwidth": "higher", "busbw": "higher", "latency": "lower",
          "read_bandwidth": "higher", "file_read_rate": "higher"}
_UNITS_OF = {"latency": ("us",), "bandwidth": ("GB/s",), "busbw": ("GB/s",), "read_bandwidth": ("GB/s",),
             "file_read_rate": ("files/s",),
             "throughput": ("images/sec", "sequences/sec", "samples/sec", "tokens/sec")}
MAX_REGEX = 300
MAX_COMMAND = 4000

#: The variables a command sees (besides what its launcher sets), and what each holds.
COMMAND_VARIABLES = {
    "DLRUN_RANK": "this process's rank, 0 .. world size - 1 (from the launcher: the first set of "
                  f"{', '.join(rank_variables())})",
    "DLRUN_LOCAL_RANK": "its rank among the processes of its node",
    "DLRUN_WORLD_SIZE": "ranks in all (nodes x ranks per node)",
    "DLRUN_NODES": "nodes of the run", "DLRUN_RANKS_PER_NODE": "ranks per node",
    "DLRUN_BATCH_SIZE": "batch per rank (--batch-size, else the system's or the workload's default)",
    "DLRUN_STEPS": "timed steps (--steps)", "DLRUN_WARMUP_STEPS": "untimed warm-up steps (--warmup-steps)",
    "DLRUN_PRECISION": "--precision", "DLRUN_DEVICE": "cuda or cpu",
    "DLRUN_THREADS": "CPU threads per rank (also OMP_NUM_THREADS)",
    "DLRUN_DATA": "where --data DIR is inside the image (empty without --data)",
}


class CommandResult(BaseModel):
    """How a command's result is read (see the module notes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: ResultFormat = Field(description=(
        "dlrun-result: one `DLRUN_RESULT {json}` line, the harness's own; regex: `regex` over the output; else "
        "the output is that tool's, read by dlrun's parser for it."))
    regex: str | None = Field(default=None, max_length=MAX_REGEX, description=(
        "format regex: a regular expression with one group, around the number; the last matching line is the "
        "value."))
    metric: FigureMetric | None = Field(default=None, description="format regex: what the number is.")
    unit: FigureUnit | None = Field(default=None, description="format regex: its unit (one the metric is measured in).")
    direction: Literal["higher", "lower"] | None = Field(default=None, description=(
        "format regex: which way is better (latency lower, every rate higher)."))
    description: str | None = Field(default=None, max_length=200, description=(
        "What the figure is, in words (the stored result's `value_is`)."))

    @model_validator(mode="after")
    def _contract(self) -> "CommandResult":
        declared = [name for name in ("regex", "metric", "unit", "direction") if getattr(self, name) is not None]
        if self.format != "regex":
            if declared:
                raise ValueError(f"format {self.format} reads the metric and unit from the output; leave out "
                                 f"{', '.join(declared)} (they belong to format: regex)")
            return self
        missing = [name for name in ("regex", "metric", "unit", "direction") if getattr(self, name) is None]
        if missing:
            raise ValueError(f"format: regex needs {', '.join(missing)}")
        try:
            groups = re.compile(self.regex or "").groups
        except re.error as exc:
            raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None
        if groups != 1:
            raise ValueError(f"regex {self.regex!r} has {groups} groups; valid: exactly one, around the number")
        if self.unit not in _UNITS_OF[str(self.metric)]:
            raise ValueError(f"metric {self.metric} is not measured in {self.unit}; valid: "
                             + ", ".join(_UNITS_OF[str(self.metric)]))
        if self.direction != BETTER[str(self.metric)]:
            raise ValueError(f"a {self.metric} is better when {BETTER[str(self.metric)]}, not {self.direction}; "
                             "valid: direction " + BETTER[str(self.metric)]
                             + " (or another metric: latency is better lower, rates higher)")
        return self

    @property
    def parser(self) -> str | None:
        """The dlrun parser's name (None for regex)."""
        return PARSER_FORMATS.get(self.format)


def check_command_fields(work: Any) -> None:
    """A command workload has a command and a result contract; no other kind has either."""
    given = [name for name in ("command", "result") if getattr(work, name) is not None]
    if work.kind == "command":
        missing = [name for name in ("command", "result") if getattr(work, name) is None]
        if missing:
            raise ValueError(f"a command workload needs {' and '.join(missing)}")
        if len(work.command) > MAX_COMMAND or "\x00" in work.command or not work.command.strip():
            raise ValueError(f"command must be non-empty shell text of at most {MAX_COMMAND} characters")
    elif given or work.run_per != "rank":
        raise ValueError(f"kind {work.kind} runs dlrun's own code: leave out "
                         + ", ".join(given + (["run_per"] if work.run_per != "rank" else [])))
