"""dlrun telemetry sampler: NVIDIA GPUs and the node's links.  Standard
library only, Python >= 3.6: shipped beside ``telemetry_sampler.py`` into the
run directory and run on every compute node, outside the container.

GPUs are read through NVML (``pynvml`` from nvidia-ml-py) when it imports and
initialises, otherwise through ``nvidia-smi --query-gpu ... --loop-ms``, whose
CSV lines are parsed as they come.  The links (PCIe speed and width of every
GPU and RDMA NIC as trained and as possible, their NUMA nodes, InfiniBand
ports, ``nvidia-smi topo -m``) are read once, as raw text, for dlrun's
topology parsers (dlrun.probe.topology).
"""

import os
import re
import shutil
import subprocess
import threading

#: nvidia-smi's query fields, in the order the fallback asks for them, and the
#: sample keys they become.  The throttle field was renamed in driver 535
#: (clocks_event_reasons); an unknown field fails the whole query, so the
#: sampler tries each spelling, then none.
SMI_FIELDS = (("index", "i"), ("utilization.gpu", "util"), ("utilization.memory", "mem_util"),
              ("clocks.sm", "sm_mhz"), ("clocks.mem", "mem_mhz"), ("power.draw", "power_w"),
              ("temperature.gpu", "temp_c"), ("memory.used", "mem_mib"),
              ("pcie.link.gen.current", "pcie_gen"), ("pcie.link.width.current", "pcie_width"))
SMI_THROTTLE = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
#: What nvidia-smi's CSV header calls a field (with units) -> its query name.
SMI_ALIASES = {"clocks.current.sm": "clocks.sm", "clocks.current.memory": "clocks.mem",
               "clocks.current.graphics": "clocks.gr", "name": "gpu_name",
               "clocks_event_reasons.active": "clocks_throttle_reasons.active"}
_MISSING = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]")
_UNIT = re.compile(r"\s*(%|W|MHz|MiB|C)$")


def smi_value(text):
    """One CSV cell: a number (units dropped), a hex mask as int, text, or None
    for N/A and [Not Supported]."""
    text = text.strip()
    if text.lower() in _MISSING:
        return None
    if text.lower().startswith("0x"):
        try:
            return int(text, 16)
        except ValueError:
            return text
    bare = _UNIT.sub("", text)
    try:
        number = float(bare)
    except ValueError:
        return text
    return int(number) if number.is_integer() and "." not in bare else number


def smi_field(header):
    """`power.draw [W]` -> power.draw (the name a query uses)."""
    name = header.strip().split(" [")[0].strip()
    return SMI_ALIASES.get(name, name)


def parse_query_csv(text, fields=None):
    """Rows of `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`
    as {query field: value}.  Without `fields` the first line is the header
    (--format=csv); lines with another number of cells are skipped (a line
    cut short, an error message)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if fields is None:
        if not lines:
            return []
        fields = [smi_field(cell) for cell in lines[0].split(",")]
        lines = lines[1:]
    rows = []
    for line in lines:
        cells = line.split(",")
        if len(cells) != len(fields):
            continue
        rows.append(dict((name, smi_value(cell)) for name, cell in zip(fields, cells)))
    return rows


def smi_sample(row):
    """A parsed nvidia-smi row -> the sampler's compact GPU record."""
    record = dict((key, row.get(field)) for field, key in SMI_FIELDS)
    for name in SMI_THROTTLE:
        if name in row or SMI_ALIASES.get(name) in row:
            record["throttle"] = row.get(name, row.get(SMI_ALIASES.get(name)))
    return record


class SmiLoop(object):
    """`nvidia-smi --query-gpu ... --loop-ms=PERIOD` in the background; the
    latest row of every GPU is what a sample takes."""

    def __init__(self, period_s, runner=subprocess):
        self.fields = None
        self.latest = {}
        self.why = None
        self.proc = None
        self._lock = threading.Lock()
        tool = shutil.which("nvidia-smi")
        if tool is None:
            self.why = "nvidia-smi is not on PATH"
            return
        self.fields = self._working_fields(tool, runner)
        if self.fields is None:
            return
        argv = [tool, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader,nounits",
                "--loop-ms=%d" % max(int(period_s * 1000), 100)]
        self.proc = runner.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 universal_newlines=True)
        thread = threading.Thread(target=self._read, name="nvidia-smi")
        thread.daemon = True
        thread.start()

    def _working_fields(self, tool, runner):
        base = [field for field, _ in SMI_FIELDS]
        said = ""
        for extra in [[name] for name in SMI_THROTTLE] + [[]]:
            try:
                out = runner.run([tool, "--query-gpu=" + ",".join(base + extra), "--format=csv,noheader,nounits"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                 timeout=30)
            except (OSError, subprocess.SubprocessError) as exc:
                self.why = "nvidia-smi failed: %s" % exc
                return None
            if out.returncode == 0 and parse_query_csv(out.stdout, base + extra):
                return base + extra
            said = out.stdout.strip().splitlines()[-1:] or [""]
        self.why = "nvidia-smi --query-gpu answered: %s" % said[0][:200]
        return None

    def _read(self):
        for line in self.proc.stdout:
            for row in parse_query_csv(line, self.fields):
                if isinstance(row.get("index"), int):
                    with self._lock:
                        self.latest[row["index"]] = smi_sample(row)

    def devices(self):
        return []  # nvidia-smi's names and bus ids are in the node inventory

    def read(self):
        with self._lock:
            return [dict(self.latest[index]) for index in sorted(self.latest)]

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Nvml(object):
    """The GPUs through NVML.  Every reading is asked for on its own: a GPU or
    driver without one (no energy counter before Volta, no NVLink on PCIe
    cards) leaves that key None, never a made-up zero."""

    def __init__(self, pynvml):
        self.nv = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                        or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        self.nvlink_fields = [getattr(pynvml, name, None) for name in
                              ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")]

    def _get(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # NVMLError_NotSupported and friends: the reading does not exist here
            return None

    def devices(self):
        nv = self.nv
        found = []
        for index, handle in enumerate(self.handles):
            name = self._get(nv.nvmlDeviceGetName, handle)
            pci = self._get(nv.nvmlDeviceGetPciInfo, handle)
            bus = getattr(pci, "busId", None)
            found.append({"i": index, "name": name.decode() if isinstance(name, bytes) else name,
                          "pci": bus.decode() if isinstance(bus, bytes) else bus,
                          "power_limit_w": _scaled(self._get(nv.nvmlDeviceGetEnforcedPowerLimit, handle), 1e-3)})
        return found

    def read(self):
        return [self._sample(index, handle) for index, handle in enumerate(self.handles)]

    def _sample(self, index, handle):
        nv, get = self.nv, self._get
        util = get(nv.nvmlDeviceGetUtilizationRates, handle)
        memory = get(nv.nvmlDeviceGetMemoryInfo, handle)
        record = {
            "i": index, "util": getattr(util, "gpu", None), "mem_util": getattr(util, "memory", None),
            "sm_mhz": get(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
            "mem_mhz": get(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
            "power_w": _scaled(get(nv.nvmlDeviceGetPowerUsage, handle), 1e-3),
            "energy_mj": get(nv.nvmlDeviceGetTotalEnergyConsumption, handle),
            "temp_c": get(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
            "mem_mib": _scaled(getattr(memory, "used", None), 1.0 / (1 << 20)),
            "throttle": get(self.reasons, handle) if self.reasons else None,
            "pcie_tx_kbs": get(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES),
            "pcie_rx_kbs": get(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_RX_BYTES),
            "pcie_gen": get(nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            "pcie_width": get(nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        }
        if all(field is not None for field in self.nvlink_fields):
            values = get(nv.nvmlDeviceGetFieldValues, handle, self.nvlink_fields) or []
            for key, value in zip(("nvlink_tx_kib", "nvlink_rx_kib"), values):
                ok = getattr(value, "nvmlReturn", 1) == 0
                record[key] = getattr(getattr(value, "value", None), "ullVal", None) if ok else None
        return record

    def close(self):
        self._get(self.nv.nvmlShutdown)


def _scaled(value, factor):
    return None if value is None else round(value * factor, 3)


def open_gpus(period_s, use_nvml=True):
    """(reader, source, why): NVML when pynvml imports and initialises, else
    nvidia-smi's loop, else none (with the reason)."""
    why = []
    if use_nvml:
        try:
            import pynvml
            return Nvml(pynvml), "nvml", None
        except ImportError:
            why.append("pynvml (nvidia-ml-py) is not installed")
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            why.append("NVML: %s" % exc)
    loop = SmiLoop(period_s)
    if loop.fields is not None:
        return loop, "nvidia-smi", "; ".join(why) or None
    why.append(loop.why)
    return None, "none", "; ".join(why)


# --- links --------------------------------------------------------------------

PCI_LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width", "numa_node",
                  "class", "vendor")
IB_PORT_FILES = ("state", "phys_state", "rate", "link_layer")


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def pci_link(root, address):
    """The link files of one PCI device, and those of every bridge port above
    it up to the root port (`upstream`, nearest first): the path's slowest
    link is the device's real one (a GPU behind a switch reports its own
    side only)."""
    base = os.path.join(root, "sys", "bus", "pci", "devices", address)
    record = dict((name, _read(os.path.join(base, name))) for name in PCI_LINK_FILES)
    upstream = []
    folder = os.path.dirname(os.path.realpath(base))
    while _PCI_ADDRESS.match(os.path.basename(folder)) and len(upstream) < 16:
        hop = dict((name, _read(os.path.join(folder, name))) for name in PCI_LINK_FILES[:4])
        hop["pci"] = os.path.basename(folder)
        upstream.append(hop)
        folder = os.path.dirname(folder)
    record["upstream"] = upstream
    return record


def collect_links(root="/"):
    """Raw link facts of the node: NVIDIA GPUs (PCI class 03, vendor 0x10de)
    and RDMA devices, each with its PCIe link; RDMA ports' state and rate."""
    devices = os.path.join(root, "sys", "bus", "pci", "devices")
    try:
        addresses = sorted(os.listdir(devices))
    except OSError:
        addresses = []
    gpus = {}
    for address in addresses:
        link = pci_link(root, address)
        if (link.get("vendor") or "").lower() == "0x10de" and (link.get("class") or "").startswith("0x03"):
            gpus[address] = link
    nics = {}
    ib_root = os.path.join(root, "sys", "class", "infiniband")
    try:
        names = sorted(os.listdir(ib_root))
    except OSError:
        names = []
    for name in names:
        address = os.path.basename(os.path.realpath(os.path.join(ib_root, name, "device")))
        ports = {}
        try:
            port_names = sorted(os.listdir(os.path.join(ib_root, name, "ports")))
        except OSError:
            port_names = []
        for port in port_names:
            ports[port] = dict((f, _read(os.path.join(ib_root, name, "ports", port, f))) for f in IB_PORT_FILES)
        nics[name] = {"pci": address, "link": pci_link(root, address), "ports": ports}
    return {"gpus": gpus, "nics": nics}


def nvidia_smi_topology(timeout=30):
    """`nvidia-smi topo -m` as printed, or None without nvidia-smi."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "topo", "-m"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout[:200000] if out.returncode == 0 else None
