"""dlrun telemetry sampler: what one node's hardware did during a run.

Standard library only, Python >= 3.6 (its GPU half, telemetry_gpu.py, sits
beside it); dlrun ships both into the run directory and starts one copy on
every node of the job, outside the container.  Every PERIOD seconds it
appends one JSON line to OUT/<node>.jsonl and flushes it, so a sampler that
is killed loses at most one period:

  {"dlrun_telemetry": 1, ...}   header: node, period, CPUs, RAPL zones (or why
                                they cannot be read), GPU source and devices,
                                the node's links (raw sysfs text, topo -m)
  {"t": ..., "cpu": [...], ...} one sample: per-core utilisation (%), load,
                                memory used, CPU clock (min/mean/max MHz),
                                RAPL counters (uJ), per GPU utilisation,
                                clocks, power, energy counter, temperature,
                                memory, throttle reasons, PCIe/NVLink traffic
  {"end": ..., "reason": ...}   why it stopped

It stops on SIGTERM, SIGINT or SIGHUP, when --stop-file appears, or (with
--watch-parent) when the process that started it is gone, taking one last
sample first.  Energy counters that cannot be read are recorded as such, with
the reason; they never read as zero.
"""

import argparse
import json
import os
import signal
import socket
import sys
import time

try:
    import telemetry_gpu as gpu  # beside this file in a run directory
except ImportError:  # imported from the dlrun package
    from dlrun.probe import telemetry_gpu as gpu

FORMAT_VERSION = 1
POLL_S = 0.2  # how often a stop request is looked for between samples


# --- CPU, memory, RAPL ----------------------------------------------------------------

def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def cpu_times(root="/"):
    """Per-core (busy, total) jiffies from /proc/stat, in core order."""
    times = []
    for line in (read_text(os.path.join(root, "proc", "stat")) or "").splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu") or parts[0] == "cpu":
            continue
        values = [int(v) for v in parts[1:] if v.isdigit()]
        idle = sum(values[3:5])  # idle + iowait
        total = sum(values[:8])  # guest time is already in user
        times.append((total - idle, total))
    return times


def utilisation(before, after):
    """Per-core busy share (%) between two cpu_times readings."""
    shares = []
    for (busy0, total0), (busy1, total1) in zip(before, after):
        span = total1 - total0
        shares.append(round(100.0 * (busy1 - busy0) / span, 1) if span > 0 else None)
    return shares


def meminfo(root="/"):
    """(total MiB, used MiB) from /proc/meminfo (used = total - available)."""
    fields = {}
    for line in (read_text(os.path.join(root, "proc", "meminfo")) or "").splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    total = fields.get("MemTotal")
    available = fields.get("MemAvailable")
    if total is None:
        return None, None
    return total // 1024, (total - available) // 1024 if available is not None else None


def cpu_mhz(root="/"):
    """[min, mean, max] clock of the cores in MHz: cpufreq where the kernel has
    it, else /proc/cpuinfo's `cpu MHz`; None where neither says."""
    base = os.path.join(root, "sys", "devices", "system", "cpu")
    values = []
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in names:
        if name.startswith("cpu") and name[3:].isdigit():
            text = read_text(os.path.join(base, name, "cpufreq", "scaling_cur_freq"))
            if text and text.strip().isdigit():
                values.append(int(text) / 1000.0)
    if not values:
        for line in (read_text(os.path.join(root, "proc", "cpuinfo")) or "").splitlines():
            if line.lower().startswith("cpu mhz"):
                try:
                    values.append(float(line.split(":", 1)[1]))
                except ValueError:
                    continue
    if not values:
        return None
    return [round(min(values)), round(sum(values) / len(values)), round(max(values))]


def load_average(root="/"):
    parts = (read_text(os.path.join(root, "proc", "loadavg")) or "").split()
    try:
        return [float(v) for v in parts[:3]]
    except ValueError:
        return None


class Rapl(object):
    """RAPL energy counters under /sys/class/powercap: each package zone and
    its DRAM subzone (the core and uncore subzones are parts of the package
    and would count twice).  `why` says why there are none to read."""

    def __init__(self, root="/"):
        self.base = os.path.join(root, "sys", "class", "powercap")
        self.zones = {}
        self.why = None
        try:
            names = sorted(os.listdir(self.base))
        except OSError:
            names = []
        for zone in names:
            parts = zone.split(":")
            if parts[0] != "intel-rapl" or not all(p.isdigit() for p in parts[1:]) or len(parts) < 2:
                continue
            name = (read_text(os.path.join(self.base, zone, "name")) or "").strip()
            if len(parts) == 3 and name != "dram":
                continue
            top = (read_text(os.path.join(self.base, zone, "max_energy_range_uj")) or "").strip()
            self.zones[zone] = {"name": name, "max_uj": int(top) if top.isdigit() else None}
        if not self.zones:
            self.why = ("no RAPL zones under /sys/class/powercap (no intel-rapl driver, a virtual machine, or a CPU "
                        "without RAPL)")
            return
        try:
            with open(os.path.join(self.base, sorted(self.zones)[0], "energy_uj")) as handle:
                handle.read()
        except OSError as exc:
            self.why = ("energy_uj is not readable by this user (%s; Linux >= 5.10 lets only root read it)"
                        % (exc.strerror or exc))
            self.zones = {}

    def header(self):
        return {"readable": bool(self.zones), "why": self.why, "zones": self.zones}

    def read(self):
        counters = {}
        for zone in self.zones:
            text = (read_text(os.path.join(self.base, zone, "energy_uj")) or "").strip()
            counters[zone] = int(text) if text.isdigit() else None
        return counters


# --- the loop -------------------------------------------------------------------------

class Stop(object):
    """Why the sampler should stop, or None: a signal, the stop file, the parent gone."""

    def __init__(self, stop_file=None, parent=None):
        self.reason = None
        self.stop_file = stop_file
        self.parent = parent
        for name in ("SIGTERM", "SIGINT", "SIGHUP"):
            signal.signal(getattr(signal, name), self._on_signal)

    def _on_signal(self, signum, frame):
        self.reason = self.reason or signal.Signals(signum).name

    def check(self):
        if self.reason is None and self.stop_file and os.path.exists(self.stop_file):
            self.reason = "stop file"
        if self.reason is None and self.parent is not None and os.getppid() != self.parent:
            self.reason = "parent exited"
        return self.reason

    def sleep_until(self, deadline):
        while self.check() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, POLL_S))


def parent_death_signal():
    """Ask the kernel for SIGTERM when the parent dies (Linux); elsewhere the
    parent is polled."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def open_series(out_dir, node):
    """OUT/<node>.jsonl, created new (a second sampler on the node gets
    <node>-<pid>.jsonl); line-buffered, private to its user."""
    os.makedirs(out_dir, exist_ok=True)
    for name in (node, "%s-%d" % (node, os.getpid())):
        try:
            fd = os.open(os.path.join(out_dir, name + ".jsonl"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        return os.fdopen(fd, "w", buffering=1)
    raise SystemExit("dlrun-telemetry: cannot create a series file in %s" % out_dir)


def write(handle, record):
    handle.write(json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    handle.flush()


def header(args, node, rapl, gpus, source, why, root):
    total, _ = meminfo(root)
    devices = gpus.devices() if gpus is not None else []
    return {"dlrun_telemetry": FORMAT_VERSION, "node": node, "host": socket.gethostname(), "pid": os.getpid(),
            "period_s": args.period, "started": time.time(), "python": sys.version.split()[0],
            "cpus": len(cpu_times(root)), "mem_total_mib": total, "rapl": rapl.header(),
            "gpu": {"source": source, "why": why, "devices": devices},
            "links": gpu.collect_links(root) if args.links else None,
            "topo_m": gpu.nvidia_smi_topology() if args.links and source != "none" else None}


def sample(root, before, rapl, gpus):
    after = cpu_times(root)
    _, used = meminfo(root)
    record = {"t": round(time.time(), 3), "cpu": utilisation(before, after), "load": load_average(root),
              "mem_mib": used, "mhz": cpu_mhz(root)}
    if rapl.zones:
        record["rapl_uj"] = rapl.read()
    if gpus is not None:
        record["gpu"] = gpus.read()
    return record, after


def run(args):
    root = args.root
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    parent = os.getppid() if args.watch_parent else None
    if args.watch_parent:
        parent_death_signal()
    stop = Stop(args.stop_file, parent)
    rapl = Rapl(root)
    gpus, source, why = gpu.open_gpus(args.period, use_nvml=not args.no_nvml)
    count = 0
    with open_series(args.out, node) as handle:
        try:
            write(handle, header(args, node, rapl, gpus, source, why, root))
            before = cpu_times(root)
            deadline = time.monotonic()
            while True:
                deadline += args.period
                stop.sleep_until(deadline)
                record, before = sample(root, before, rapl, gpus)
                write(handle, record)
                count += 1
                if stop.check() is not None:
                    break
        finally:
            if gpus is not None:
                gpus.close()
            used = os.times()  # what sampling cost this node: the sampler's own CPU seconds
            write(handle, {"end": round(time.time(), 3), "samples": count, "reason": stop.reason or "error",
                           "cpu_s": round(used[0] + used[1], 3)})
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dlrun-telemetry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--period", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("--out", required=True, help="directory of the per-node series files")
    parser.add_argument("--stop-file", help="stop once this file exists (batch jobs: the end-of-job trap writes it)")
    parser.add_argument("--watch-parent", action="store_true", help="stop when the process that started it is gone")
    parser.add_argument("--no-nvml", action="store_true", help="read GPUs with nvidia-smi even where pynvml imports")
    parser.add_argument("--no-links", dest="links", action="store_false", help="do not record the node's links")
    parser.add_argument("--root", default="/", help=argparse.SUPPRESS)  # a fake /proc and /sys (tests)
    args = parser.parse_args(argv)
    if not 0.05 <= args.period <= 3600:
        parser.error("--period %r: valid: 0.05 to 3600 seconds" % args.period)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
