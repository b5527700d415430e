"""dlrun PyTorch harness: the speed knobs - what each run used and why - and
thread pinning, which must be settled before torch is imported.  Standard
library only; importing this module changes nothing.

A knob decides how fast a step runs, never what it computes: the memory
allocator, the fused optimizer step, the fused batch norm + ReLU kernel,
channels-last, threads per rank and their pinning, torch.compile, cuDNN's
algorithm search.  The result records
each as ``{"value": ..., "source": ...}`` where source is

* ``asked for``: the user gave it;
* ``tuned``: dlrun's tuner measured the choices on this machine and kept
  the fastest (``dlrun tune``);
* ``default``: nobody chose; the harness's (or dlrun's) default.

dlrun renders some values itself (``--threads`` always, tuned knobs as
flags), so it says where each came from in ``DLRUN_KNOB_SOURCES``
("threads=default,allocator=tuned,..."); without it a flag on the command
line counts as asked for and a value left at auto as the default.
"""

import json
import os

from harness_common import HarnessError
from harness_contract import (KNOB_SOURCES_ENV, KNOBS, TUNE_TRIAL_ENV,
                              local_rank_variables, parse_knob_sources)
from harness_pytorch_allocator import ALLOCATOR_CHOICES

#: Local rank variables of every launcher, in the contract's order.
LOCAL_RANK_ENV = tuple(local_rank_variables())
#: What pin_threads did in this process: the CPUs its threads are bound to.
PINNING = {"cpus": None, "note": None}


#: The auto/on/off knobs' options and their help ("" for none).
SWITCHES = (
    ("--channels-last", ""),
    ("--pin-threads", "on: bind each OpenMP thread to one CPU of this rank's "
                      "share (OMP_PROC_BIND, OMP_PLACES); auto and off leave "
                      "placement to the OS"),
    ("--cudnn-benchmark", "CUDA: let cuDNN time its algorithms for each shape "
                          "(auto and on; off: its heuristics); no effect on a "
                          "CPU"),
    ("--fused-optimizer", "auto (default): on a CPU PyTorch's default step "
                          "unless the fused one was measured to win on this "
                          "processor kind (harness_contract.MEASURED_WINS), "
                          "on CUDA the fused step where there is one; on: "
                          "fused or exit 2; off: PyTorch's default step"),
    ("--fused-bn-relu", "auto (default): ResNets' batch norm + ReLU through "
                        "one fused kernel in fp32 channels-last CPU training "
                        "where it builds and was measured to win on this "
                        "processor kind (harness_pytorch_bnrelu.py); on: "
                        "that or exit 2; off: PyTorch's ops"),
)


def add_knob_options(p):
    """The speed knobs' options (what dlrun tune measures; each also
    recorded with its source, see knob_fields)."""
    p.add_argument("--compile", nargs="?", const="on", default="auto",
                   choices=("auto", "on", "off"),
                   help="torch.compile (inductor) the model where this "
                        "PyTorch has it (on; --compile alone means on); "
                        "auto and off run eagerly")
    for flag, text in SWITCHES:
        p.add_argument(flag, choices=("auto", "on", "off"), default="auto",
                       help=text or None)
    p.add_argument("--allocator", choices=ALLOCATOR_CHOICES, default="auto",
                   help="memory allocator: auto (tcmalloc, else jemalloc, "
                        "else glibc-tuned), tcmalloc, jemalloc, glibc-tuned "
                        "(glibc that keeps freed memory) or system (the C "
                        "library's malloc untouched); default auto")


def argv_value(argv, flag, default=None):
    """The value of ``flag`` in raw argv (``--flag V`` or ``--flag=V``; the
    last one wins), else ``default``."""
    value = default
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def flag_given(argv, flag):
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def knob_sources(environ=None):
    """{knob: source} from KNOB_SOURCES_ENV (harness_contract)."""
    environ = os.environ if environ is None else environ
    return parse_knob_sources(environ.get(KNOB_SOURCES_ENV, ""))


def knob_record(values, argv, environ=None):
    """{knob: {"value": v, "source": s}} for the knobs in ``values``."""
    sources = knob_sources(environ)
    record = {}
    for name in KNOBS:
        if name not in values:
            continue
        source = sources.get(name)
        if source is None:
            given = flag_given(argv, "--" + name.replace("_", "-"))
            source = "asked for" if given else "default"
        record[name] = {"value": values[name], "source": source}
    return record


def local_rank(environ=None):
    environ = os.environ if environ is None else environ
    for key in LOCAL_RANK_ENV:
        try:
            return int(environ[key])
        except (KeyError, ValueError):
            continue
    return 0


def rank_cpus(cpus, threads, rank):
    """The CPUs of local rank ``rank`` when every rank takes ``threads`` of
    ``cpus`` in turn (wrapping round when there are more threads than CPUs)."""
    cpus = sorted(cpus)
    if not cpus:
        return []
    start = (rank * threads) % len(cpus)
    return [cpus[(start + i) % len(cpus)]
            for i in range(min(threads, len(cpus)))]


def pin_threads(argv, environ=None, affinity=None):
    """``--pin-threads on``: bind this rank's OpenMP threads one per CPU
    (OMP_PROC_BIND=close, OMP_PLACES = this rank's share of the CPUs it may
    run on).  Must run before torch is imported: the OpenMP runtime reads
    these variables when it is loaded.  Variables the user set are kept.
    Returns PINNING."""
    environ = os.environ if environ is None else environ
    if argv_value(argv, "--pin-threads", "auto") != "on":
        return PINNING
    if "OMP_PLACES" in environ or "OMP_PROC_BIND" in environ:
        PINNING["note"] = "OMP_PLACES/OMP_PROC_BIND set in the environment"
        return PINNING
    getaffinity = affinity or getattr(os, "sched_getaffinity", None)
    if getaffinity is None:
        PINNING["note"] = "this platform has no CPU affinity"
        return PINNING
    cpus = sorted(getaffinity(0))
    try:
        threads = int(argv_value(argv, "--threads",
                                 environ.get("OMP_NUM_THREADS", "0")))
    except ValueError:
        threads = 0
    chosen = rank_cpus(cpus, threads or len(cpus), local_rank(environ))
    environ["OMP_PROC_BIND"] = "close"
    environ["OMP_PLACES"] = ",".join("{%d}" % cpu for cpu in chosen)
    PINNING["cpus"] = chosen
    return PINNING


def knob_fields(args, outcome, bert, device_type):
    """The result's fields on the knobs of a training run: ``knobs`` (value
    and source of each), the CPUs its threads were pinned to, and the
    seconds of the untimed warm-up (where torch.compile compiles)."""
    import torch  # imported already by the caller; not at this module's top

    from harness_pytorch_allocator import ALLOCATOR

    def on_off(flag):
        return "on" if flag else "off"

    cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
    values = {
        "allocator": ALLOCATOR["name"],
        "fused_optimizer": on_off(outcome["fused_optimizer"]),
        "fused_bn_relu": outcome.get("fused_bn_relu", ("n/a", None))[0],
        "channels_last": "n/a" if bert else on_off(outcome["channels_last"]),
        "threads": torch.get_num_threads(),
        "pin_threads": on_off(PINNING["cpus"]),
        "compile": on_off(outcome["compiled"]),
        "cudnn_benchmark": (on_off(getattr(cudnn, "benchmark", False))
                            if device_type == "cuda" else "n/a"),
    }
    return {"knobs": knob_record(values, getattr(args, "raw_argv", [])),
            "fused_bn_relu_off_because": outcome.get(
                "fused_bn_relu", ("n/a", None))[1],
            "pinned_cpus": PINNING["cpus"],
            "warmup_time_s": outcome["warmup_s"]}


def trial_spec(environ=None):
    """The tuning trial dlrun asked for in DLRUN_TUNE_TRIAL (a JSON object,
    see harness_pytorch_tune.py), else None."""
    environ = os.environ if environ is None else environ
    text = environ.get(TUNE_TRIAL_ENV)
    if not text:
        return None
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise HarnessError("bad %s: %s" % (TUNE_TRIAL_ENV, exc))
    if not isinstance(spec, dict):
        raise HarnessError("bad %s: a JSON object was expected" % TUNE_TRIAL_ENV)
    return spec
