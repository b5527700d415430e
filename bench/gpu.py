"""Benchmark 6, on a GPU machine: dlrun's GPU paths run for real, one JSON file out, in at most 8 minutes.

Runs with the machine's own python3 and its CUDA PyTorch; dlrun from this source tree (PYTHONPATH=launcher)
and the pure-Python wheels the machine lacks (pydantic and its dependencies, `make gpu-wheels` beforehand,
unpacked with `pip install --no-index --no-deps --target`); no network. Standard library only here: every
measurement runs in a process of its own, so one that fails or overruns its share is recorded and the next
one runs. The seven measurements:

  1 resnet       ResNet-50 v1.5 (and ResNet-18) through `dlrun run` vs a bare loop (bench/gpu_bare.py),
                 fp16 autocast, channels-last, batch 256: img/s and their ratio (the harness must not
                 serialise the GPU)
  2 bert         BERT-base SQuAD through `dlrun run --precision fp16` and `--precision bf16`: sequences/s
  3 matmul       `dlrun measure matmul` (fp32 without TF32, amp = fp16) and bare products at fp32, tf32,
                 fp16, bf16: TFLOP/s and the fraction of the device's datasheet peak
  4 nccl         a one-rank NCCL process group: every collective on exact values, algorithm bandwidth (the
                 collective harness needs two ranks, which one GPU cannot hold under NCCL)
  5 telemetry    what run 1 recorded: power, energy per image, clocks, throttling; the node's topology
  6 data         ResNet-50 from JPEG and TFRecord data (pinned memory, 8 workers) vs synthetic
  7 tf32         fp32 products with TF32 off and on: the switch is honoured when they differ

  python3 bench/gpu.py --out gpu.json            # on the GPU machine (bench/gpu.sh sets up the paths)
  python3 bench/gpu.py --dry-run                 # the command lines, without running anything
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 480
#: Dense peaks (TFLOP/s) by device name, from NVIDIA's datasheets (the tensor-core figures there are quoted
#: with 2:4 sparsity; dense is half of them).
PEAKS = {
    "H100 80GB HBM3": ({"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
                       "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: FP32 67, TF32 989, BF16/FP16 1,979 "
                       "TFLOPS (tensor figures with sparsity)"),
    "H200": ({"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5},
             "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: FP32 67, TF32 989, BF16/FP16 1,979 TFLOPS "
             "(tensor figures with sparsity)"),
}


def dlrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "dlrun.cli", *args]


def bare(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "bench" / "gpu_bare.py"), *args]


def plan(work: Path) -> list[dict]:
    """Every step: its name, command, share of the budget (s) and what its output is."""
    train = ("--ranks-per-node", "1", "--batch-size", "256", "--steps", "60", "--warmup-steps", "15",
             "--precision", "amp")
    jpeg, tfrecord = str(work / "jpeg"), str(work / "tfrecord")
    data = ("--ranks-per-node", "1", "--batch-size", "256", "--steps", "20", "--warmup-steps", "5",
            "--precision", "amp", "--data-workers", "8")
    steps = [
        ("env", [sys.executable, "-c", "import json, torch; print(json.dumps({'torch': torch.__version__, "
                 "'cuda': torch.version.cuda, 'device': torch.cuda.get_device_name(0), "
                 "'cudnn': torch.backends.cudnn.version(), 'nccl': '.'.join(map(str, torch.cuda.nccl.version()))}))"],
         30, "json"),
        ("driver", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                    "--format=csv,noheader"], 30, "text"),
        ("doctor", dlrun("doctor", "--json"), 60, "json"),
        ("resnet50_dlrun", dlrun("run", "resnet50", *train), 90, "run"),
        ("resnet50_bare", bare("train", "--model", "resnet50_v1.5"), 60, "json"),
        ("resnet18_dlrun", dlrun("run", "resnet18", *train), 60, "run"),
        ("resnet18_bare", bare("train", "--model", "resnet18"), 45, "json"),
        ("bert_fp16", dlrun("run", "bert_squad", "--ranks-per-node", "1", "--batch-size", "32", "--steps", "20",
                            "--warmup-steps", "5", "--precision", "fp16"), 75, "run"),
        ("bert_bf16", dlrun("run", "bert_squad", "--ranks-per-node", "1", "--batch-size", "32", "--steps", "20",
                            "--warmup-steps", "5", "--precision", "bf16"), 75, "run"),
        ("matmul_dlrun", dlrun("measure", "matmul", "--system", "localhost", "--precision", "fp32",
                               "--precision", "tf32", "--precision", "fp16", "--precision", "bf16",
                               "--size", "8192", "--json"), 60, "json"),
        ("matmul_bare", bare("matmul"), 45, "json"),
        ("nccl", bare("nccl"), 45, "json"),
        ("synth_jpeg", dlrun("data", "synth", "--format", "jpeg", "--images", "2048", "--classes", "10",
                             "--size", "256", jpeg), 60, "text"),
        ("synth_tfrecord", dlrun("data", "synth", "--format", "tfrecord", "--images", "2048", "--classes", "10",
                                 "--size", "256", tfrecord), 60, "text"),
        ("resnet50_jpeg", dlrun("run", "resnet50", *data, "--data", jpeg), 75, "run"),
        ("resnet50_tfrecord", dlrun("run", "resnet50", *data, "--data", tfrecord), 75, "run"),
    ]
    return [{"name": n, "argv": a, "timeout_s": t, "output": o} for n, a, t, o in steps]


def _stored(env: dict[str, str]) -> dict | None:
    """The newest stored run (dlrun results show --json), whatever its status."""
    listed = subprocess.run(dlrun("results", "list", "--json", "--limit", "1"), capture_output=True, text=True,
                            env=env, timeout=60)
    runs = json.loads(listed.stdout or "[]")
    if not runs:
        return None
    shown = subprocess.run(dlrun("results", "show", runs[0]["id"], "--json"), capture_output=True, text=True,
                           env=env, timeout=60)
    return json.loads(shown.stdout)


def run_step(step: dict, env: dict[str, str], left: float) -> dict:
    timeout = min(step["timeout_s"], max(left, 1.0))
    started = time.monotonic()
    try:
        proc = subprocess.run(step["argv"], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"ran past its {timeout:.0f} s"}
    except OSError as exc:
        return {"ok": False, "why": str(exc)}
    record: dict = {"ok": proc.returncode == 0, "exit_code": proc.returncode,
                    "seconds": round(time.monotonic() - started, 1)}
    if proc.returncode != 0:
        record["tail"] = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
    if step["output"] == "json" and proc.returncode == 0:
        record["data"] = json.loads(proc.stdout.strip().splitlines()[-1] if step["name"].endswith("bare")
                                    or step["name"] in ("env", "nccl") else proc.stdout)
    elif step["output"] == "text":
        record["text"] = proc.stdout.strip()[-2000:]
    elif step["output"] == "run":
        stored = _stored(env)
        record["run"] = {k: stored.get(k) for k in ("id", "status", "results", "provenance")} if stored else None
    return record


def _value(records: dict, name: str, *path: str):
    value = records.get(name, {})
    for key in path:
        value = value.get(key) if isinstance(value, dict) else (value[0] if isinstance(value, list) and value
                                                                else None)
    return value


def summarize(records: dict) -> dict:
    """The figures the seven measurements are about, next to their goals."""
    out: dict = {}
    for model in ("resnet50", "resnet18"):
        mine = _value(records, f"{model}_dlrun", "run", "results", "value")
        base = _value(records, f"{model}_bare", "data", "images_per_sec")
        out[model] = {"dlrun_img_s": mine, "bare_img_s": base,
                      "ratio": round(mine / base, 3) if mine and base else None}
    out["resnet50"]["goals"] = "dlrun >= 3000 img/s and >= 1.0x the bare loop (H100)"
    out["bert_squad_seq_s"] = {"fp16": _value(records, "bert_fp16", "run", "results", "value"),
                               "bf16": _value(records, "bert_bf16", "run", "results", "value")}
    device = _value(records, "env", "data", "device") or ""
    peak = next((p for name, p in PEAKS.items() if name in device), None)
    rates = _value(records, "matmul_bare", "data", "tflops") or {}
    out["matmul_tflops"] = {k: {"tflops": round(v, 1), "fraction_of_peak": round(v / peak[0][k], 3) if peak else None}
                            for k, v in rates.items()}
    out["matmul_peak_source"] = peak[1] if peak else f"no datasheet peak here for {device!r}"
    out["tf32_switch_honoured"] = (rates["tf32"] > 1.5 * rates["fp32"]) if rates else None
    out["nccl"] = _value(records, "nccl", "data")
    out["telemetry"] = _value(records, "resnet50_dlrun", "run", "provenance", "telemetry")
    out["data_img_s"] = {"synthetic": out["resnet50"]["dlrun_img_s"],
                         "jpeg": _value(records, "resnet50_jpeg", "run", "results", "value"),
                         "tfrecord": _value(records, "resnet50_tfrecord", "run", "results", "value")}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu.json")
    parser.add_argument("--dry-run", action="store_true", help="print the steps as JSON; run nothing")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dlrun-gpu-"))
    steps = plan(work)
    if args.dry_run:
        print(json.dumps({"work": str(work), "budget_s": args.budget_s, "steps": steps}, indent=1))
        return 0
    env = {**os.environ, "DLRUN_HOME": str(work / "home"), "PYTHONUNBUFFERED": "1"}
    deadline = time.monotonic() + args.budget_s
    records = {}
    for step in steps:
        left = deadline - time.monotonic()
        records[step["name"]] = run_step(step, env, left) if left > 5 else {"ok": False, "why": "out of time"}
        print(f"{step['name']}: {json.dumps(records[step['name']])[:300]}", file=sys.stderr, flush=True)
    result = {"host": platform.node(), "python": platform.python_version(), "summary": summarize(records),
              "steps": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(result["summary"], indent=1, default=str))
    return 0 if all(r.get("ok") for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
