#!/usr/bin/env bash
# Benchmark 6, on the GPU machine as it is: its own python3 with its CUDA PyTorch, dlrun from this source tree,
# and pydantic with its dependencies from the wheels in .whl/ (downloaded beforehand, where there is network,
# with `make gpu-wheels`). Nothing is downloaded here. One JSON file out (bench/results/gpu.json, or --out),
# at most 8 minutes (bench/gpu.py says what it measures).
#   bench/gpu.sh                    # run
#   bench/gpu.sh --dry-run          # print the command lines only
#   PYTHON=/path/to/python3 bench/gpu.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
if ! "$PYTHON" -c 'import pydantic' 2>/dev/null; then
  if ! compgen -G ".whl/*.whl" >/dev/null; then
    echo "bench/gpu.sh: $PYTHON has no pydantic and .whl/ holds no wheels; run make gpu-wheels first" >&2
    exit 2
  fi
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl
fi
export PYTHONPATH="$site:$PWD/launcher${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" bench/gpu.py "$@"
