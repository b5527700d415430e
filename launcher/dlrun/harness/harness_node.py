"""dlrun harnesses: the node a job runs on, as the job sees it - the
architecture its code runs as (and whether that is emulated), its CPU
(model name, vendor, family/model/stepping, instruction-set level), sockets
and cores, memory, NVIDIA driver, RDMA ports and NICs.  The machine part of
a run's fingerprint and comparability key comes from here, whether the
harness reports it from a compute node or dlrun's launcher probes the node
it runs on (it imports this file as ``dlrun.harness.harness_node``).
Standard library only; imports no other harness file; Python >= 3.6.
"""

import os
import platform
import re
import time

CPUINFO = "/proc/cpuinfo"
#: x86-64 micro-architecture levels (the psABI's), each by the flags it
#: adds to the one below; a CPU is at the highest level whose flags it has.
X86_LEVELS = (
    ("x86-64-v2", ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3")),
    ("x86-64-v3", ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm",
                   "movbe", "xsave")),
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq",
                   "avx512vl")),
)
#: Extensions beyond the level that decide deep-learning kernels: bfloat16
#: and float16 arithmetic, int8 dot products, matrix tiles (x86, Arm), SVE.
ISA_EXTRAS = ("avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
              "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "sve", "sve2",
              "bf16", "i8mm", "asimd", "vsx", "altivec")
#: /proc/cpuinfo's identity lines: x86 (vendor_id, cpu family, model,
#: stepping), Arm (CPU implementer, part, variant, revision), POWER (cpu,
#: revision).
IDENTITY_KEYS = (("vendor_id", "vendor"), ("cpu family", "family"),
                 ("model", "model"), ("stepping", "stepping"),
                 ("CPU implementer", "implementer"), ("CPU part", "part"),
                 ("CPU variant", "variant"), ("CPU revision", "revision"),
                 ("cpu", "cpu"), ("revision", "revision"))


#: The architectures dlrun's images are built for (uname's names).
ARCHES = ("x86_64", "ppc64le", "aarch64")
#: An ELF file's (e_machine, EI_DATA byte order) -> the architecture's name
#: as dlrun writes it (uname's).
ELF_ARCH = {(62, 1): "x86_64", (21, 1): "ppc64le", (21, 2): "ppc64",
            (183, 1): "aarch64", (183, 2): "aarch64_be", (3, 1): "i686",
            (40, 1): "arm", (243, 1): "riscv64", (22, 2): "s390x"}
#: The CPU architecture the kernel itself runs on, from the lines of its
#: /proc/cpuinfo (qemu-user passes the host's file through unchanged for
#: these targets, so a process emulated by it still sees the real CPU).
CPUINFO_ARCH = (("vendor_id", "x86_64"), ("CPU implementer", "aarch64"),
                ("cpu", "ppc64le"))


def elf_arch(path):
    """The architecture an ELF executable is built for (its header's machine
    and byte order), or None where `path` is no ELF file."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except (IOError, OSError):
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[5] not in (1, 2):
        return None
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    return ELF_ARCH.get((machine, head[5]), "elf-machine-%d" % machine)


def kernel_arch(text):
    """The CPU architecture /proc/cpuinfo's text describes, or None."""
    fields = first_processor(text)
    for key, arch in CPUINFO_ARCH:
        if key in fields:
            return arch
    return None


def arch_facts(executable=None, cpuinfo=None):
    """The architecture this process's interpreter is built for, the one
    the node's CPU is, and whether the code is emulated (the two differ:
    qemu-user through binfmt_misc).  Detected, never assumed: the ELF header
    of the interpreter against the kernel's /proc/cpuinfo."""
    import sys

    arch = elf_arch(executable or sys.executable) or platform.machine()
    host = kernel_arch(_read(CPUINFO) if cpuinfo is None else cpuinfo)
    return {"arch": arch, "host_arch": host or arch,
            "emulated": bool(host) and host != arch}


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:  # none there, or a process that has just ended
        return []


def first_processor(text):
    """{key: value} of /proc/cpuinfo's first processor block."""
    fields = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def node_cpu_ticks(text=None):
    """(busy, total, CPUs) ticks over the node's CPUs from /proc/stat (or
    its ``text``; steal is busy: another guest had the CPU), or None."""
    lines = ((_read("/proc/stat") if text is None else text) or "").splitlines()
    for line in lines[:1]:
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:9]] + [0] * 8
            cpus = sum(1 for x in lines if x[:3] == "cpu" and x[3:4].isdigit())
            return sum(v[:8]) - v[3] - v[4], sum(v[:8]), cpus or None
    return None


def process_started_unix(pid=None):
    """When process ``pid`` (this one by default) started, in Unix seconds
    (10 ms ticks), or None where /proc does not say.  exec keeps a
    process's start, so for a rank that a shell script exec'd, and that
    re-executed itself for its allocator, it is when its launcher forked
    it.  Read against /proc/uptime: both count from boot, so no clock step
    since boot moves it."""
    text = _read("/proc/%d/stat" % (os.getpid() if pid is None else pid))
    uptime = _read("/proc/uptime")
    if not text or ")" not in text or not uptime:
        return None
    try:
        ticks = int(text[text.rfind(")") + 2:].split()[19])
        since_boot = float(uptime.split()[0])
        hz = float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, IndexError, OSError):
        return None
    return time.time() - (since_boot - ticks / hz)


def cpu_name(text=None):
    """The CPU's model name as /proc/cpuinfo gives it (else what platform
    knows)."""
    fields = first_processor(_read(CPUINFO) if text is None else text)
    return (fields.get("model name") or fields.get("cpu")  # cpu: POWER
            or platform.processor() or platform.machine() or "cpu")


def cpu_identity(text):
    """The CPU's identity beyond its marketing name (which cloud VMs often
    hide: "AMD EPYC" is Zen 2 to Zen 5): ``"GenuineIntel family 6 model 143
    stepping 8"``, ``"implementer 0x41 part 0xd40 variant 0x1 revision 1"``
    or ``"cpu POWER9, altivec supported revision 2.2"``; None where
    /proc/cpuinfo says nothing of it."""
    fields = first_processor(text)
    words = []
    for key, label in IDENTITY_KEYS:
        if key in fields and label not in [w[0] for w in words]:
            words.append((label, fields[key]))
    if not words:
        return None
    return " ".join(value if label == "vendor" else "%s %s" % (label, value)
                    for label, value in words)


def processor_kind(text=None):
    """(vendor, CPU family, model) of this node's CPU (or of cpuinfo
    ``text``), what decides which knobs' defaults were measured to win
    (harness_contract.MEASURED_WINS); None where /proc/cpuinfo does not say
    (Arm and POWER report no x86 family)."""
    words = (cpu_identity(
        _read(os.environ.get("DLRUN_HARNESS_TEST_CPUINFO") or CPUINFO)
        if text is None else text) or "").split()
    try:
        return (words[0], int(words[words.index("family") + 1]),
                int(words[words.index("model") + 1]))
    except (IndexError, ValueError):
        return None


def isa_level(text):
    """The instruction-set level that decides which kernels run: the x86-64
    level and the deep-learning extensions (``"x86-64-v4+amx_bf16+
    avx512_bf16"``), else the extensions an Arm or POWER CPU reports; None
    where /proc/cpuinfo lists no flags."""
    fields = first_processor(text)
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if not flags and "cpu" in fields:
        flags = set(w.strip(",").lower() for w in fields["cpu"].split())
    if not flags:
        return None
    level = None
    if "lm" in flags or "sse2" in flags:
        level = "x86-64"
        for name, needs in X86_LEVELS:
            if not flags.issuperset(needs):
                break
            level = name
    extras = sorted(flags.intersection(ISA_EXTRAS))
    return "+".join(([level] if level else []) + extras) or None


def cpu_has_native_bf16(cpuinfo=CPUINFO):
    """True where the CPU computes bfloat16 in hardware (x86 AVX512_BF16 or
    AMX-BF16, Arm BF16), False where /proc/cpuinfo says it does not, None
    where it cannot tell."""
    text = _read(cpuinfo)
    if text is None:
        return None
    fields = first_processor(text[:1 << 20])
    words = fields.get("flags") or fields.get("Features")
    if words is None:
        return None
    return bool(set(words.split()) & {"avx512_bf16", "amx_bf16", "bf16"})


def node_facts(gpus=None):
    """This node as the job sees it (the fingerprint's node part): CPU model
    and identity (family/model/stepping, instruction-set level),
    sockets and physical cores (sysfs topology), memory, the NVIDIA driver,
    RDMA ports and NICs with their rates; ``gpus`` ([{name, memory_mib}])
    from the framework."""
    packages, cores = set(), set()
    base = "/sys/devices/system/cpu"
    for name in [n for n in _listdir(base) if n[3:].isdigit()]:
        package = _read("%s/%s/topology/physical_package_id" % (base, name))
        core = _read("%s/%s/topology/core_id" % (base, name))
        if package is not None:
            packages.add(package.strip())
            cores.add((package.strip(), (core or "").strip()))
    memory = re.search(r"MemTotal:\s+(\d+)", _read("/proc/meminfo") or "")
    match = re.search(r"^([\d.]+)$|Kernel Module(?:\s+for\s+\S+)?\s+([\d.]+)",
                      (_read("/sys/module/nvidia/version")
                       or _read("/proc/driver/nvidia/version") or "").strip())
    cpuinfo = _read(CPUINFO)
    arch = arch_facts(cpuinfo=cpuinfo or "")
    facts = {"hostname": platform.node(), "cpu_model": cpu_name(cpuinfo),
             "cpu_id": cpu_identity(cpuinfo),
             # an emulated process runs the host's CPU through qemu: the
             # host's instruction set is not the one its code was built for
             "isa": None if arch["emulated"] else isa_level(cpuinfo),
             "arch": arch["arch"], "host_arch": arch["host_arch"],
             "emulated": arch["emulated"],
             "sockets": len(packages) or None,
             "physical_cores": len(cores) or None,
             "memory_kib": int(memory.group(1)) if memory else None,
             "driver": (match.group(1) or match.group(2)) if match else None,
             # the node's GPUs, also those CUDA_VISIBLE_DEVICES hides from a rank
             "gpus_on_node": len(_listdir("/proc/driver/nvidia/gpus")) or None,
             "fabrics": _fabrics()}
    if gpus is not None:
        facts["gpus"] = gpus
    return facts


def _fabrics():
    """RDMA ports and NICs as dlrun's inventory records them (their rates)."""
    def attrs(where, keys):
        return dict((key, (_read(where + name) or "").strip() or None)
                    for key, name in keys)
    ib, net = "/sys/class/infiniband/", "/sys/class/net/"
    devices = [{"name": dev, "ports": [
        attrs("%s%s/ports/%s/" % (ib, dev, port),
              [(k, k) for k in ("link_layer", "state", "rate")])
        for port in sorted(_listdir(ib + dev + "/ports"))]}
        for dev in sorted(_listdir(ib))]
    nics = []
    for name in sorted(_listdir(net)):
        nic = attrs(net + name + "/", [("type", "type"), ("speed_mbps", "speed"),
                                       ("operstate", "operstate")])
        nic.update(name=name, virtual=not os.path.exists(net + name + "/device"),
                   type="ethernet" if nic["type"] == "1" else "other")
        nics.append(nic)
    return {"rdma_devices": devices, "interfaces": nics}
