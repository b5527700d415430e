#!/usr/bin/env bash
# Benchmark 6 (GPU machines only): ResNet-50 v1.5 training, AMP (fp16 autocast + grad scaler), channels-last,
# synthetic data, batch 256 on one GPU, through `dlrun run` and through a bare PyTorch loop with the same
# model definition; prints both img/s, their ratio (goal >= 0.98) and the dlrun figure vs 3,000 img/s.
# Self-contained: creates its own virtual environment (CUDA build of the pinned torch) unless PYTHON is given.
#   bench/gpu.sh                      # set-up + run
#   PYTHON=/path/to/python bench/gpu.sh   # use an interpreter that already has a CUDA torch and dlrun
# Knobs: BATCH (256), STEPS (100), WARMUP (20), REPEATS (3), TORCH_SPEC (torch==2.13.0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BATCH=${BATCH:-256}
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-20}
REPEATS=${REPEATS:-3}
GOAL_IMG_S=3000
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ -z "${PYTHON:-}" ]; then
  venv=${GPU_VENV:-.venv-gpu}
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    # The default PyPI wheel of torch on x86_64 Linux is the CUDA build.
    "$venv/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC" numpy
    echo "$TORCH_SPEC" > "$venv/constraints.txt"
    "$venv/bin/pip" install -q --disable-pip-version-check -c "$venv/constraints.txt" -e .
  fi
  PYTHON="$venv/bin/python"
fi
DLRUN="$(dirname "$PYTHON")/dlrun"
if ! "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "bench/gpu.sh: no CUDA device visible to torch; nothing to measure" >&2
  exit 1
fi
"$PYTHON" - <<'PY'
import torch
print("device: %s, torch %s, CUDA %s, cuDNN %s" % (torch.cuda.get_device_name(0), torch.__version__,
      torch.version.cuda, torch.backends.cudnn.version()))
PY
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true

home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
# The bare loop runs under the memory allocator the harness picks on this machine (like for like).
mapfile -t alloc_env < <("$PYTHON" - <<'PY'
import sys
sys.path.insert(0, "bench")
from common import allocator_env, harness_allocator
name, library = harness_allocator()
sys.stderr.write("allocator (harness and bare loop): %s %s\n" % (name, library or ""))
for key, value in allocator_env(name, library).items():
    print("%s=%s" % (key, value))
PY
)
bare() {
  env "${alloc_env[@]}" "$PYTHON" - "$BATCH" "$STEPS" "$WARMUP" <<'PY'
import sys, time, json
import torch, torch.nn as nn
sys.path.insert(0, "launcher")
from dlrun.workloads import load_harness
batch, steps, warmup = (int(v) for v in sys.argv[1:4])
h = load_harness("pytorch")
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda", 0)
torch.manual_seed(1234)
model = h.build_model("resnet50_v1.5").to(dev).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
crit = nn.CrossEntropyLoss().to(dev)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
def step():
    opt.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        loss = crit(model(x), y)
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
for _ in range(warmup): step()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(steps): step()
torch.cuda.synchronize()
print(json.dumps({"images_per_sec": batch * steps / (time.perf_counter() - t)}))
PY
}
via_dlrun() {
  DLRUN_HOME="$home" "$DLRUN" run resnet50 --ranks-per-node 1 --batch-size "$BATCH" --steps "$STEPS" --warmup-steps "$WARMUP" \
    --precision amp >"$home/out.log" 2>&1 || { tail -20 "$home/out.log" >&2; return 1; }
  DLRUN_HOME="$home" "$DLRUN" results list --json --limit 1 | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)[0]["value"])'
}
d=(); b=()
for i in $(seq "$REPEATS"); do
  d+=("$(via_dlrun)")
  b+=("$(bare | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["images_per_sec"])')")
  echo "round $i: dlrun ${d[-1]} img/s, bare ${b[-1]} img/s"
done
"$PYTHON" - "$BATCH" "$GOAL_IMG_S" "${#d[@]}" "${d[@]}" "${b[@]}" <<'PY'
import statistics, sys
batch, goal, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
d = [float(v) for v in sys.argv[4:4 + n]]
b = [float(v) for v in sys.argv[4 + n:4 + 2 * n]]
md, mb = statistics.median(d), statistics.median(b)
print("ResNet-50 v1.5 AMP NHWC batch %s, 1 GPU (medians of %d): dlrun %.0f img/s, bare %.0f img/s" % (batch, n, md, mb))
print("  dlrun/bare %.3f  (goal >= 0.98: %s)" % (md / mb, "PASS" if md / mb >= 0.98 else "MISS"))
print("  dlrun %.0f img/s (goal >= %.0f: %s)" % (md, goal, "PASS" if md >= goal else "MISS"))
PY
