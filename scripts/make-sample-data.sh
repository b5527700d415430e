#!/usr/bin/env bash
# Make samples/sample-localhost.bundle: real dlrun runs of the `trivial` workload on the machine that runs this
# script (system localhost, image host), stored under the site name `sample-data.invalid` (a reserved,
# never-real domain) so that they never pass for a real site's or a seed system's measurements, exported as a
# signed bundle. Tuning is off (every run on the default code path), so that the configurations compare like-for-like.
# A fresh clone imports it to learn compare, report and check before running anything:
#   dlrun results import samples/sample-localhost.bundle --allowed-signers samples/allowed_signers
# Usage: scripts/make-sample-data.sh SIGNING_KEY (an ed25519 private key; its public half goes into
# samples/allowed_signers as principal sample-data@dlrun), with a dlrun environment's Python first on PATH.
set -euo pipefail
key=${1:?usage: $0 SIGNING_KEY}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clean environment: the run directories the bundle carries record it (environment.json), and they should
# say nothing about the machine that made them beyond what a run needs.
dlrun=(env -i HOME="$work/user" PATH="$(dirname "$(command -v python)"):/usr/bin:/bin" LANG=C.UTF-8
       PYTHONPATH="$repo/launcher" DLRUN_HOME="$work/home" XDG_CONFIG_HOME="$work/config"
       DLRUN_SITE=sample-data.invalid python -m dlrun.cli)
for repeat in 1 2 3; do
  "${dlrun[@]}" run trivial --steps 20 --warmup-steps 2 --tune off >/dev/null                      # 1 rank, fp32
  "${dlrun[@]}" run trivial --ranks-per-node 2 --steps 20 --warmup-steps 2 --tune off >/dev/null   # 2 ranks (mpirun)
  "${dlrun[@]}" run trivial --precision amp --steps 20 --warmup-steps 2 --tune off >/dev/null      # 1 rank, bfloat16 autocast
  echo "repeat $repeat done"
done
"${dlrun[@]}" results list
"${dlrun[@]}" results export --out "$repo/samples/sample-localhost.bundle" --sign "$key" --with-logs
# The bundle is published: it must not name where this machine really keeps its Python environment when the runs
# went through a link from a neutral path (e.g. /opt/dlrun-sample/venv -> the real one).
prefix=$(python -c 'import sys; print(sys.prefix)')
real_prefix=$(realpath "$prefix")
tar xzf "$repo/samples/sample-localhost.bundle" -O > "$work/members"
if [ "$real_prefix" != "$prefix" ] && grep -qF "$real_prefix" "$work/members"; then
  echo "the bundle names $real_prefix; run from a neutral path" >&2; exit 1
fi
echo "sample-data@dlrun namespaces=\"dlrun-bundle\" $(cut -d' ' -f1,2 "$key.pub")" > "$repo/samples/allowed_signers"
