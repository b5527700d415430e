#!/usr/bin/env bash
# Builds Horovod from its source release against the torch (and, when it imports, the TensorFlow) of one
# Python environment, caches the wheel and installs it. A second run installs the cached wheel (seconds);
# a run where the right Horovod is installed already does nothing.
#
#   scripts/build-horovod.sh [PYTHON]        (default .venv/bin/python)
#
# Environment: HOROVOD_VERSION (default 0.28.1), DLRUN_WHEEL_CACHE (where the built wheel is cached; default
# $XDG_CACHE_HOME/dlrun/wheels, i.e. ~/.cache/dlrun/wheels), PIP_CONSTRAINT (pins torch while Horovod's own
# dependencies install). Relative paths are taken from the directory this is started in.
# Needs cmake, g++ and an MPI with headers (Debian: cmake g++ libopenmpi-dev).
#
# Two edits make the 0.28.1 sources build with current frameworks: torch >= 2.1 headers need C++17 (Horovod's
# CMake files ask for C++14), and TensorFlow 2.x no longer provides what the XLA ops file includes (Horovod
# then builds without its XLA ops; everything else of horovod.tensorflow is there).
set -euo pipefail

PY=${1:-.venv/bin/python}
VERSION=${HOROVOD_VERSION:-0.28.1}
CACHE=${DLRUN_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlrun/wheels}

# The build runs pip in a temporary directory (Horovod's setup_requires), where a relative path names nothing:
# every path this script hands on is made absolute here.
absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }
[ "$PY" = "${PY#*/}" ] || PY=$(absolute "$PY")
CACHE=$(absolute "$CACHE")
if [ -n "${PIP_CONSTRAINT:-}" ]; then
  [ -f "$PIP_CONSTRAINT" ] || { echo "build-horovod: PIP_CONSTRAINT=$PIP_CONSTRAINT is no file" >&2; exit 2; }
  export PIP_CONSTRAINT=$(absolute "$PIP_CONSTRAINT")
fi

# torch version, TensorFlow version or "none", Python tag: what the compiled extensions are bound to. Read from
# the installed metadata (importing TensorFlow takes longer than installing a cached wheel).
read -r PYTAG TORCH_V TF_V HVD_V PREFIX < <("$PY" - <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version

def installed(*names):
    for name in names:
        try:
            return version(name)
        except PackageNotFoundError:
            pass
    return "none"

print("py%d%d" % sys.version_info[:2], installed("torch"), installed("tensorflow", "tensorflow-cpu"),
      installed("horovod"), sys.prefix)
PYEOF
)
[ "$TORCH_V" != none ] || { echo "build-horovod: torch is not installed in $PY" >&2; exit 2; }
KEY="horovod-$VERSION-$PYTAG-torch$TORCH_V-tf$TF_V"
DIR="$CACHE/$KEY"
MARK="$PREFIX/.dlrun-$KEY"  # written after this script installed and imported exactly this build

want="import horovod, horovod.torch; assert horovod.__version__ == '$VERSION'"
[ "$TF_V" != none ] && want="$want; import horovod.tensorflow"
if [ "$HVD_V" = "$VERSION" ] && [ -e "$MARK" ]; then
  echo "horovod $VERSION ($KEY) is installed"
  exit 0
fi

if ! ls "$DIR"/horovod-*.whl >/dev/null 2>&1; then
  for tool in cmake g++ mpicxx; do
    command -v "$tool" >/dev/null || { echo "build-horovod: $tool not found; install: apt-get install -y cmake g++ libopenmpi-dev" >&2; exit 2; }
  done
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  start=$(date +%s)
  echo "building horovod $VERSION from source ($KEY); this takes minutes"
  "$PY" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps -d "$work" "horovod==$VERSION"
  tar -C "$work" -xzf "$work/horovod-$VERSION.tar.gz"
  src="$work/horovod-$VERSION"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
  flags=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MXNET=1)
  if [ "$TF_V" != none ]; then
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$src/horovod/tensorflow/CMakeLists.txt"
    sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
    flags+=(HOROVOD_WITH_TENSORFLOW=1)
  else
    flags+=(HOROVOD_WITHOUT_TENSORFLOW=1)
  fi
  "$PY" -m pip install -q --disable-pip-version-check setuptools wheel
  env "${flags[@]}" MAKEFLAGS="-j$(nproc)" "$PY" -m pip wheel -q --disable-pip-version-check --no-build-isolation \
    --no-deps -w "$work/wheel" "$src"
  mkdir -p "$DIR"
  cp "$work"/wheel/horovod-*.whl "$DIR/"
  echo "built $(basename "$(ls "$DIR"/horovod-*.whl)") in $(( $(date +%s) - start )) s; cached in $DIR"
fi

"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$DIR"/horovod-*.whl
# Horovod's own run-time dependencies (horovodrun), with torch held where PIP_CONSTRAINT pins it.
"$PY" -m pip install -q --disable-pip-version-check cloudpickle psutil pyyaml packaging cffi
touch "$MARK"
"$PY" -c "$want"
echo "horovod $VERSION installed ($KEY)"
