"""A default never loses: a code-path knob's static default (auto, the tuner off) is its reference value (PyTorch's
own ops, eagerly, in its default layout) unless it was measured to win on the processor kind at hand
(harness_contract.MEASURED_WINS, by the CPU's vendor, family and model). Given processor kinds, then the harness in
real processes told another CPU's /proc/cpuinfo."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlrun.harness.harness_contract import CODE_PATH_KNOBS, MEASURED_WINS, measured_default
from dlrun.harness.harness_node import processor_kind
from pathlib import Path

ZEN5, ZEN4, XEON = ("AuthenticAMD", 26, 2), ("AuthenticAMD", 25, 17), ("GenuineIntel", 6, 143)
REFERENCE = dict(CODE_PATH_KNOBS)
HARNESS = Path(__file__).resolve().parents[1] / "launcher" / "dlrun" / "harness" / "harness_pytorch.py"


def _cpuinfo(vendor: str, family: int, model: int) -> str:
    return (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: a test CPU\nstepping\t: 1\nflags\t\t: fpu sse2 avx2 avx512f\n\n")


@pytest.mark.parametrize("kind, channels_last, fused_bn_relu", [
    (ZEN5, "on", "on"),     # both measured to win on a Zen 5
    (ZEN4, "on", "off"),    # NHWC measured to win; the fused batch norm + ReLU 1.006 and 1.000: no win
    (XEON, "off", "off"),   # nothing measured to win: the reference
    (None, "off", "off"),   # a CPU that does not say what it is
])
def test_auto_is_the_reference_unless_measured_to_win_on_this_processor_kind(kind, channels_last, fused_bn_relu):
    assert measured_default("channels_last", "off", "cpu", "fp32", kind) == channels_last
    assert measured_default("fused_bn_relu", "off", "cpu", "fp32", kind) == fused_bn_relu
    # the fused SGD step lost on every CPU it was measured on (Zen 5 0.935, Zen 4 0.98-0.995, Xeon 0.87-1.01)
    assert measured_default("fused_optimizer", "off", "cpu", "fp32", kind) == "off"
    # a win measured in fp32 says nothing of amp
    assert measured_default("channels_last", "off", "cpu", "amp", kind) == "off"


def test_every_measured_win_is_a_code_path_knob_off_its_reference():
    for knob, value, device, precisions, kinds in MEASURED_WINS:
        assert knob in REFERENCE and value != REFERENCE[knob] and device == "cpu" and precisions and kinds
        assert all(len(k) == 3 and isinstance(k[1], int) for k in kinds)


def test_the_processor_kind_is_read_from_cpuinfo():
    assert processor_kind(_cpuinfo(*ZEN4)) == ZEN4
    assert processor_kind("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n") is None  # Arm: no family


def _knobs(tmp_path, kind) -> dict:
    info = tmp_path / "cpuinfo"
    info.write_text(_cpuinfo(*kind))
    proc = subprocess.run([sys.executable, str(HARNESS), "--model", "trivial",
                           "--batch-size", "2", "--steps", "1", "--warmup-steps", "0", "--device", "cpu",
                           "--threads", "1"], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "DLRUN_HARNESS_TEST_CPUINFO": str(info)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.split("DLRUN_RESULT ", 1)[1].splitlines()[0])["knobs"]


def test_the_harness_runs_the_reference_where_nothing_was_measured_and_the_winner_where_it_was(tmp_path):
    import torch

    knobs = _knobs(tmp_path, XEON)
    assert knobs["fused_optimizer"] == {"value": "off", "source": "default"}
    assert knobs["channels_last"] == {"value": "off", "source": "default"}
    knobs = _knobs(tmp_path, ZEN4)
    assert knobs["fused_optimizer"]["value"] == "off"
    assert knobs["channels_last"]["value"] == ("on" if torch.backends.mkldnn.is_available() else "off")
