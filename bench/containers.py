"""Benchmark 4: container overhead - the `cpu-reference` image running the same harness workload under
Charliecloud (ch-run) and Podman, each over the same root filesystem run directly with chroot (in a private
mount namespace with /dev, /proc and /sys, which the harness needs).

Compared: the harness's reported throughput (timed steps only) in each runtime; rounds alternate
chroot/ch-run/podman. Skipped, with the command that builds the image, when the image is not built here;
the Podman row is skipped when the image has not been imported into Podman.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

from common import REPO_ROOT, Row, alternate, bench_env, median, spread, write_result

GOAL = 0.97
MODEL = "resnet18"  # cheaper than ResNet-50; the same workload in every runtime is what matters here
IMAGE = "cpu-reference"
BUILD_HINT = "dlrun images build cpu-reference --engine debootstrap"


def _rootfs():
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    try:
        from dlrun.images.spec import rootfs_path
    except Exception as exc:
        return None, f"image support not available ({type(exc).__name__}: {exc})"
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    path = rootfs_path(IMAGE, arch)
    if not (path / "opt" / "dlrun" / "harness_pytorch.py").exists():
        return None, f"{IMAGE} not built ({path} has no harness)"
    return path, None


def _podman_ref():
    if not shutil.which("podman"):
        return None
    try:
        out = subprocess.run(["podman", "images", "--format", "json"], capture_output=True, text=True,
                             timeout=60).stdout
        for image in json.loads(out or "[]"):
            for name in image.get("Names") or []:
                if f"/{IMAGE}:" in name:
                    return name
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return None


def _value(stdout: str) -> float:
    for line in reversed(stdout.splitlines()):
        if line.startswith("DLRUN_RESULT "):
            return float(json.loads(line[len("DLRUN_RESULT "):])["value"])
    raise RuntimeError("no DLRUN_RESULT line")


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    rootfs, why = _rootfs()
    if rootfs is None:
        log(f"[4] skipped: {why}")
        return [Row("4 container overhead", f"{IMAGE}: ch-run, podman vs chroot", None, goal=GOAL,
                    status="SKIP", detail=f"skipped: {why} (run: {BUILD_HINT})")]
    harness = ["python3", "/opt/dlrun/harness_pytorch.py", "--model", MODEL, "--batch-size", "16",
               "--steps", "8", "--warmup-steps", "2", "--threads", str(threads), "--device", "cpu",
               "--expected-world-size", "1"]
    env = bench_env(threads)
    env.setdefault("USER", "root")
    # chroot in a private mount namespace with /dev, /proc and /sys bound, as ch-run and podman provide them;
    # the mounts vanish with the namespace.
    mount_and_chroot = ('r=$1; shift; mount --rbind /dev "$r/dev" && mount -t proc proc "$r/proc" && '
                        'mount --rbind /sys "$r/sys" && exec chroot "$r" /usr/bin/env "$@"')
    commands = {"chroot": ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount_and_chroot,
                           "sh", str(rootfs), f"OMP_NUM_THREADS={threads}", *harness]}
    if shutil.which("ch-run"):
        commands["ch-run"] = ["ch-run", str(rootfs), "--", "env", f"OMP_NUM_THREADS={threads}", *harness]
    podman = _podman_ref()
    if podman:
        commands["podman"] = ["podman", "run", "--rm", "--network", "host", "-e", f"OMP_NUM_THREADS={threads}",
                              podman, *harness]
    if os.geteuid() != 0 or not shutil.which("unshare"):
        commands.pop("chroot")

    def runner(argv):
        def fn():
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
            return _value(proc.stdout)
        return fn

    log(f"[4] {IMAGE} at {rootfs}: {MODEL} batch 16 via {', '.join(commands)}")
    rows: list[Row] = []
    try:
        # Runs take seconds: two extra rounds steady ratios whose goal sits near 1 (a neighbour's job moves
        # a single run by 10-30 % on a shared 2-core machine).
        rounds = repeats if quick else repeats + 2
        samples = alternate({name: runner(argv) for name, argv in commands.items()}, rounds, log)
    except Exception as exc:
        reason = " ".join(str(exc).split())[-300:]
        write_result("containers", {"error": reason, "rootfs": str(rootfs)})
        return [Row("4 container overhead", f"{IMAGE}", None, goal=GOAL, status="SKIP", detail=f"failed: {reason}")]
    base_name = "chroot" if "chroot" in samples else None
    base = median(samples[base_name]) if base_name else None
    for name in ("ch-run", "podman"):
        if name not in samples:
            rows.append(Row("4 container overhead", f"{IMAGE}: {name} / chroot", None, goal=GOAL, status="SKIP",
                            detail=("podman: image not imported (dlrun images load/podman import)"
                                    if name == "podman" else "ch-run not installed")))
            continue
        if base is None:
            rows.append(Row("4 container overhead", f"{IMAGE}: {name}", None, goal=GOAL, status="SKIP",
                            detail="chroot baseline needs root"))
            continue
        # Median of per-round ratios: each round runs the variants back to back, which cancels load drift.
        ratio = median([v / b for v, b in zip(samples[name], samples["chroot"])])
        rows.append(Row("4 container overhead", f"{IMAGE}: {name} / chroot", ratio, goal=GOAL,
                        detail=f"median of per-round ratios; {name} {spread(samples[name])} vs chroot "
                               f"{spread(samples['chroot'])} img/s"))
    write_result("containers", {"rootfs": str(rootfs), "podman_image": podman, "model": MODEL,
                                "samples_img_s": samples,
                                "goal": GOAL, "threads": threads})
    return rows
