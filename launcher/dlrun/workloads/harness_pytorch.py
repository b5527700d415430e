#!/usr/bin/env python
"""dlrun in-container PyTorch training benchmark harness.

Runs a synthetic-data image-classification training benchmark in the style of
tf_cnn_benchmarks (same model names, same log layout, same "images/sec"
definition) and ends with exactly one machine-readable result line.

This file is copied verbatim into containers, some of them old: it needs only
the Python standard library and torch, and runs on Python >= 3.6 with
PyTorch >= 1.0.  Newer PyTorch features are used only behind feature checks
(``hasattr(torch, "autocast")``, ``hasattr(torch, "channels_last")``,
``hasattr(torch, "compile")``, ``torch.backends.mkldnn``), never behind version
comparisons.

Usage
-----
    python harness_pytorch.py --model resnet50_v1.5 --batch-size 64 --steps 100
    python harness_pytorch.py --describe --model vgg16

Options (see ``--help``): --model, --describe, --batch-size (per rank,
default 32), --steps (timed steps, default 100), --warmup-steps (default 10),
--precision fp32|amp, --channels-last auto|on|off, --device auto|cpu|cuda,
--threads N, --expected-world-size N, --backend auto|gloo|nccl|mpi, --seed,
--display-every N (default 10), --lr (default 0.01), --momentum (default 0.9),
--data-workers J, --compile, --allocator.

Models
------
alexnet, resnet18, resnet34, resnet50, resnet101, resnet152,
resnet50_v1.5, resnet101_v1.5, resnet152_v1.5, vgg16, inception3, lenet,
trivial.  All have 1000 classes.

* ``resnetN`` (N >= 50) is ResNet v1 as in tf_cnn_benchmarks: the stride-2 of
  a downsampling bottleneck block is on its first 1x1 convolution.
  ``resnetN_v1.5`` puts it on the 3x3 convolution (torchvision, NVIDIA,
  MLPerf).  Both have the same parameters; v1.5 costs more multiply-adds.
  resnet18/resnet34 use basic blocks, where v1 and v1.5 coincide.
* ``alexnet`` and ``vgg16`` (configuration D, no batch norm) follow the
  torchvision definitions, including the adaptive average pooling before the
  classifier.  ``inception3`` is torchvision's Inception-v3 without the
  auxiliary head, at 299x299.
* ``lenet`` is tf_cnn_benchmarks' lenet (conv 32 5x5 SAME, maxpool 2,
  conv 64 5x5 SAME, maxpool 2, fc 512, fc classes) on 28x28 inputs with
  3 channels and 1000 classes, i.e. what tf_cnn_benchmarks builds for the
  (synthetic) imagenet data set, not the 1-channel, 10-class MNIST variant.
* ``trivial`` is a tiny model (conv 3->8 3x3 + batch norm + global average
  pool + fc 1000) on 32x32 inputs, for fast smoke tests only; unlike
  tf_cnn_benchmarks' trivial it is not meant to measure anything.

Default input sizes: 3x224x224; inception3 3x299x299; lenet 3x28x28;
trivial 3x32x32.

Training benchmark
------------------
A fixed random batch of images and integer labels is generated once per rank
(seeded with --seed + rank) and kept on the device, as tf_cnn_benchmarks'
synthetic data; nothing is generated on the critical path, so --data-workers
is accepted (and recorded) but has nothing to do.  Loss is cross entropy,
the optimizer SGD with momentum.

* ``--precision amp``: bfloat16 autocast on CPU, float16 autocast plus a
  gradient scaler on CUDA.  Exit 2 if this PyTorch has no autocast.
* ``--channels-last auto`` means: on for CUDA, on for amp on CPU, on for
  fp32 on CPU where oneDNN (mkldnn) is available - its NHWC convolution
  kernels train ResNet-50 faster than NCHW (1.1x to 1.4x measured on a
  2-core AVX-512 CPU) - and off otherwise (always off wherever
  torch.channels_last does not exist).
  ``on`` fails (exit 2) where channels-last is unsupported.
* ``--compile`` uses torch.compile where it exists and otherwise warns and
  runs eagerly (the result records ``compiled``).

Memory allocator (``--allocator``, default auto): glibc's malloc returns
large freed tensors to the kernel and page-faults them back on every step,
which cost ResNet-50 fp32 training on a 2-core CPU a third of its speed.
Run as a program, the harness therefore re-executes itself once, before
importing torch, with a caching allocator in LD_PRELOAD: auto takes
tcmalloc (libtcmalloc_minimal.so.4), else jemalloc (libjemalloc.so.2, with
MALLOC_CONF set to keep freed memory unless MALLOC_CONF is set), else
"glibc-tuned": glibc told through mallopt never to trim its heap and to
serve allocations up to 32 MiB from it.  ``system`` leaves malloc as it is.
The libraries are looked for in the Python prefix's lib directory and the
system library directories; an allocator already in LD_PRELOAD is kept.
A named allocator that cannot be loaded is an error (exit 2).  Children of
the harness inherit the original LD_PRELOAD.  Imported as a module the
harness cannot re-execute: auto then means glibc-tuned.

Rank, world size and local rank come from the environment, first match wins:
torchrun (RANK, WORLD_SIZE, LOCAL_RANK); Open MPI (OMPI_COMM_WORLD_RANK,
OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK); PMIx (PMIX_RANK, size
from OMPI_COMM_WORLD_SIZE or SLURM_NTASKS); Slurm (SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID); otherwise one process.  With more than one
process the process group is initialised with
``init_method="tcp://MASTER_ADDR:MASTER_PORT"`` (defaults 127.0.0.1 and
29500; the mpi backend needs no rendezvous) and the model is wrapped in
DistributedDataParallel.  Backend auto is nccl on CUDA and gloo on CPU.

Timing: warm-up steps are excluded.  Before the timed loop every rank waits at
a barrier and synchronises its device; every timed step ends with a device
synchronisation (as tf_cnn_benchmarks' per-step session.run), so per-step
times are real.  Each rank's wall time is that of its whole timed loop.
Rate of one rank = batch_size_per_rank * timed_steps / its wall time; the
total is ``world_size*batch_size_per_rank*timed_steps/wall_time_s`` where
``wall_time_s`` is the MAXIMUM wall time over ranks (conservative).  The
per-step log rows show the global rate estimated from rank 0's step times
(world_size * batch / mean step time, +/- the standard error, jitter = 1.4826
* median absolute deviation), as tf_cnn_benchmarks prints them.

Output: rank 0 writes a tf_cnn_benchmarks-like log to stdout, ending with
"total images/sec: N" and then exactly one line ``DLRUN_RESULT {json}``
(json.dumps with sort_keys).  Result fields: allocator (tcmalloc,
jemalloc, glibc-tuned or system), allocator_library (path or null),
amp_dtype ("bfloat16", "float16" or null), backend, batch_size_per_rank,
channels_last, compiled, cuda_version / cudnn_version / nccl_version (only
when present), data_format, data_workers, device ("cpu" or "cuda"),
device_name, final_loss, formula, framework ("pytorch"), framework_version,
global_batch_size, harness_version, image_size, lr, metric ("throughput"),
mkldnn, model, momentum, num_classes, num_devices, optimizer, params,
per_rank_images_per_sec, per_rank_wall_time_s, precision, python_version,
rank_source, seed, status ("ok"), threads, timed_steps, unit ("images/sec"),
value, wall_time_reduction ("max_over_ranks"), wall_time_s, warmup_steps,
world_size.  ``backend`` is "none" for a single process (no process group).

With more than one rank, a float64 checksum (sum and sum of absolute values)
of all parameters is compared across ranks at the end (all-reduce MAX and
MIN, relative tolerance 1e-6 of the absolute sum); any difference is reported
as "replicas diverged" (exit 4, no result line).

Errors are one stderr line starting with ``dlrun-harness: error:`` (an
unexpected exception also prints its traceback before that line).  Exit
codes: 0 ok; 1 unexpected failure; 2 bad option or unsupported feature;
3 world size differs from --expected-world-size; 4 replicas diverged;
6 all-reduce returned wrong values (--benchmark allreduce);
5 non-finite loss (one process: checked at every displayed step; several:
checked at the end, all ranks agreeing through an all-reduce).

Test hook: if DLRUN_HARNESS_TEST_PERTURB_RANK=R is set, rank R adds 1.0 to
its first parameter tensor after training, before the replica check (with
--benchmark allreduce: adds 1.0 to the first element it contributes to each
checked all-reduce), so that tests can prove the checks fire.  It has no
other effect.

All-reduce benchmark (``--benchmark allreduce``, at least 2 ranks): for each
message size from --min-bytes to --max-bytes (x --size-factor; float32
elements), --warmup-steps untimed and --steps timed in-place sum
all-reduces of a zero buffer over the process group (gloo on CPU, NCCL on
CUDA), then one check all-reduce where rank r contributes r + 1 (every
element must come back n (n + 1) / 2; any wrong element: exit 6).  Time
per size = the slowest rank's mean per all-reduce; algbw = bytes / time and
busbw = algbw * 2 (n - 1) / n in GB/s (nccl-tests' definitions).  Rank 0
prints an nccl-tests-like table and a DLRUN_RESULT with metric "busbw",
value = busbw at the largest size, unit "GB/s", avg_busbw, and every size
in "sizes" (bytes, count, time_us, algbw_gbs, busbw_gbs, wrong).
"""

import argparse
import ctypes
import datetime
import gc
import glob
import json
import math
import os
import platform
import sys
import time
import traceback

HARNESS_VERSION = "1"
ERROR_PREFIX = "dlrun-harness: error: "
PERTURB_ENV = "DLRUN_HARNESS_TEST_PERTURB_RANK"
NUM_CLASSES = 1000
REPLICA_RTOL = 1e-6
RULE = "-" * 64

EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
EXIT_WORLD_SIZE = 3
EXIT_DIVERGED = 4
EXIT_NONFINITE = 5
EXIT_WRONG_RESULT = 6


class HarnessError(Exception):
    """An anticipated failure: reported as one line, exits with ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


# --- Memory allocator: settled before torch is imported ----------------------
#
# glibc's malloc hands every large tensor (activations of tens of MiB) back to
# the kernel when it is freed and page-faults it in again on the next step.
# On a 2-core CPU that cost ResNet-50 fp32 training about a third of its
# throughput (millions of minor faults per run), and how much of it a process
# paid depended on its heap layout, so two identical training loops differed
# by 10 %.  A caching allocator (tcmalloc, jemalloc) keeps the memory.  The
# harness therefore re-executes itself once, before torch is imported, with
# the chosen allocator in LD_PRELOAD, as Intel's PyTorch CPU launchers do.

ALLOCATOR_CHOICES = ("auto", "tcmalloc", "jemalloc", "glibc-tuned", "system")
ALLOCATOR_LIBRARIES = (
    ("tcmalloc", ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")),
    ("jemalloc", ("libjemalloc.so.2",)),
)
# Keep freed memory instead of purging it (Intel's recommended settings).
JEMALLOC_CONF = ("oversize_threshold:0,background_thread:true,"
                 "metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1")
# Set across the re-exec: the LD_PRELOAD the harness was started with.
REEXEC_ENV = "DLRUN_HARNESS_ORIGINAL_LD_PRELOAD"
# glibc-tuned: (mallopt parameter number from malloc.h, glibc's environment
# name for the same setting, value).  Never trim the heap; serve allocations
# up to glibc's largest mmap threshold (32 MiB on 64-bit) from it.
GLIBC_TUNING = (
    (-3, "MALLOC_MMAP_THRESHOLD_", 32 * 1024 * 1024),  # M_MMAP_THRESHOLD
    (-1, "MALLOC_TRIM_THRESHOLD_", 2 ** 31 - 1),        # M_TRIM_THRESHOLD
    (-2, "MALLOC_TOP_PAD_", 64 * 1024 * 1024),          # M_TOP_PAD
)


def mapped_allocator(maps_text=None):
    """(name, path) of tcmalloc or jemalloc if one is mapped into this
    process (/proc/self/maps), else (None, None)."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except (IOError, OSError):
            return None, None
    for line in maps_text.splitlines():
        fields = line.split()
        path = fields[5] if len(fields) >= 6 else ""
        for name, _ in ALLOCATOR_LIBRARIES:
            if "/lib%s" % name in path:
                return name, path
    return None, None


def loaded_allocator(maps_text=None):
    """tcmalloc or jemalloc if one is mapped into this process, else None."""
    return mapped_allocator(maps_text)[0]


def library_dirs(prefix=None):
    """Where a system or conda/venv allocator library may live."""
    dirs = []
    for base in (prefix or sys.prefix, getattr(sys, "base_prefix", None)):
        if base:
            dirs.append(os.path.join(base, "lib"))
    dirs += sorted(glob.glob("/usr/lib/*-linux-gnu"))
    dirs += sorted(glob.glob("/lib/*-linux-gnu"))
    dirs += ["/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib64", "/lib"]
    seen = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def find_allocator(name, dirs=None):
    """Path of the named allocator's shared library, or None."""
    files = dict(ALLOCATOR_LIBRARIES)[name]
    for d in (dirs if dirs is not None else library_dirs()):
        for f in files:
            path = os.path.join(d, f)
            if os.path.isfile(path):
                return path
    return None


def plan_allocator(requested, loaded, find, can_exec=True, reexeced=False):
    """Decide what to do: ("use", name, None) when `name` is already in
    effect or needs no preload (glibc-tuned, system); ("exec", name, library)
    to re-execute with `library` preloaded.  Raises HarnessError when an
    explicit request cannot be met."""
    if loaded is not None:
        if requested in ("auto", loaded):
            return ("use", loaded, None)
        raise HarnessError(
            "--allocator %s: %s is already loaded (LD_PRELOAD=%r); unset "
            "LD_PRELOAD or use --allocator auto|%s"
            % (requested, loaded, os.environ.get("LD_PRELOAD", ""), loaded))
    if requested in ("glibc-tuned", "system"):
        return ("use", requested, None)
    wanted = ("tcmalloc", "jemalloc") if requested == "auto" else (requested,)
    found = [(name, find(name)) for name in wanted]
    found = [(name, lib) for name, lib in found if lib is not None]
    if found and can_exec and not reexeced:
        return ("exec", found[0][0], found[0][1])
    if requested == "auto":
        return ("use", "glibc-tuned", None)
    if reexeced:
        raise HarnessError("--allocator %s: preloading it did not take "
                           "effect (is the library for this architecture?)"
                           % requested)
    if found:
        raise HarnessError(
            "--allocator %s: not loaded in this process; start the harness "
            "as a program or with LD_PRELOAD=%s" % (requested, found[0][1]))
    package = {"tcmalloc": "libtcmalloc-minimal4",
               "jemalloc": "libjemalloc2"}[requested]
    raise HarnessError(
        "--allocator %s: no lib%s shared library found in %s; install %s "
        "or use --allocator auto|glibc-tuned|system"
        % (requested, requested, ", ".join(library_dirs()), package))


def tune_glibc_malloc():
    """Keep freed memory in the heap: never trim it, and serve allocations
    up to glibc's maximum mmap threshold from the heap.  True on success
    (False on C libraries without mallopt)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    results = [mallopt(param, value) == 1 for param, _, value in GLIBC_TUNING]
    return all(results)


def _argv_allocator(argv):
    """--allocator's value from raw argv (argparse validates it later);
    None where no benchmark will run."""
    value = "auto"
    for i, arg in enumerate(argv):
        if arg in ("-h", "--help", "--describe"):
            return None
        if arg == "--allocator" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--allocator="):
            value = arg.split("=", 1)[1]
    return value if value in ALLOCATOR_CHOICES else None


# What setup_allocator decided: {"name": ..., "library": ...}.
ALLOCATOR = {"name": None, "library": None}


def setup_allocator(requested, allow_exec, environ=None, execve=None):
    """Put the requested allocator in effect in this process.  With
    allow_exec (the harness run as a program) this may re-execute the
    process with LD_PRELOAD set and never return."""
    environ = os.environ if environ is None else environ
    reexeced = REEXEC_ENV in environ
    if reexeced:
        # Children (compilers, tools) inherit the user's LD_PRELOAD, not ours.
        original = environ.pop(REEXEC_ENV)
        if original:
            environ["LD_PRELOAD"] = original
        else:
            environ.pop("LD_PRELOAD", None)
    loaded, loaded_path = mapped_allocator()
    action, name, library = plan_allocator(
        requested, loaded, find_allocator, allow_exec, reexeced)
    if action == "exec":
        env = dict(environ)
        original = environ.get("LD_PRELOAD", "")
        env[REEXEC_ENV] = original
        env["LD_PRELOAD"] = library + (":" + original if original else "")
        if name == "jemalloc" and "MALLOC_CONF" not in env:
            env["MALLOC_CONF"] = JEMALLOC_CONF
        # The interpreter's own flags too (sys.orig_argv, Python >= 3.10).
        argv = list(getattr(sys, "orig_argv", None) or
                    [sys.executable] + sys.argv)
        argv[0] = sys.executable
        sys.stdout.flush()
        sys.stderr.flush()
        (execve or os.execve)(sys.executable, argv, env)
        return ALLOCATOR  # only reached with a test double for execve
    if name == "glibc-tuned" and not tune_glibc_malloc():
        name = "system"
    ALLOCATOR["name"] = name
    ALLOCATOR["library"] = loaded_path if name == loaded else None
    return ALLOCATOR


if __name__ == "__main__":
    _requested = _argv_allocator(sys.argv[1:])
    if _requested is not None:
        try:
            setup_allocator(_requested, allow_exec=True)
        except Exception as _exc:  # HarnessError is defined below
            sys.stderr.write("dlrun-harness: error: %s\n"
                             % getattr(_exc, "message", _exc))
            sys.exit(getattr(_exc, "code", 1))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class _NullContext(object):
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

def _flatten(x):
    # nn.Flatten is newer than the oldest supported torch; reshape (unlike
    # view) also copes with channels-last activations.
    return x.reshape(x.size(0), -1)


class AlexNet(nn.Module):
    """torchvision AlexNet (61.10 M parameters)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(AlexNet, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(_flatten(x))


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None,
                 stride_on_3x3=True):
        super(_BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None,
                 stride_on_3x3=True):
        super(_Bottleneck, self).__init__()
        # v1.5: stride on the 3x3 convolution; v1: on the first 1x1.
        stride_1x1, stride_3x3 = (1, stride) if stride_on_3x3 else (stride, 1)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, stride=stride_1x1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride_3x3,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """ResNet for 224x224 ImageNet; ``stride_on_3x3`` selects v1.5 (True)
    or v1 (False) bottleneck blocks."""

    def __init__(self, block, layers, stride_on_3x3=True,
                 num_classes=NUM_CLASSES):
        super(ResNet, self).__init__()
        self.inplanes = 64
        self.stride_on_3x3 = stride_on_3x3
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0], 1)
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out",
                                        nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1,
                          stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample,
                        self.stride_on_3x3)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, 1, None,
                                self.stride_on_3x3))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(_flatten(self.avgpool(x)))


_VGG16_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
              512, 512, 512, "M", 512, 512, 512, "M"]


class VGG16(nn.Module):
    """torchvision VGG-16, configuration D, no batch norm (138.36 M)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(VGG16, self).__init__()
        layers = []
        in_ch = 3
        for v in _VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers.append(nn.Conv2d(in_ch, v, kernel_size=3, padding=1))
                layers.append(nn.ReLU(inplace=True))
                in_ch = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(),
            nn.Linear(4096, num_classes),
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out",
                                        nonlinearity="relu")
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(_flatten(x))


class _BasicConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0):
        super(_BasicConv2d, self).__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size, stride=stride,
                              padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_ch, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class _InceptionA(nn.Module):
    def __init__(self, in_ch, pool_features):
        super(_InceptionA, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 64, 1)
        self.branch5x5_1 = _BasicConv2d(in_ch, 48, 1)
        self.branch5x5_2 = _BasicConv2d(48, 64, 5, padding=2)
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = _BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _BasicConv2d(96, 96, 3, padding=1)
        self.branch_pool = _BasicConv2d(in_ch, pool_features, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class _InceptionB(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionB, self).__init__()
        self.branch3x3 = _BasicConv2d(in_ch, 384, 3, stride=2)
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 64, 1)
        self.branch3x3dbl_2 = _BasicConv2d(64, 96, 3, padding=1)
        self.branch3x3dbl_3 = _BasicConv2d(96, 96, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = F.max_pool2d(x, 3, stride=2)
        return torch.cat([b3, bd, bp], 1)


class _InceptionC(nn.Module):
    def __init__(self, in_ch, c7):
        super(_InceptionC, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 192, 1)
        self.branch7x7_1 = _BasicConv2d(in_ch, c7, 1)
        self.branch7x7_2 = _BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7_3 = _BasicConv2d(c7, 192, (7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = _BasicConv2d(in_ch, c7, 1)
        self.branch7x7dbl_2 = _BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = _BasicConv2d(c7, c7, (1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = _BasicConv2d(c7, c7, (7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = _BasicConv2d(c7, 192, (1, 7), padding=(0, 3))
        self.branch_pool = _BasicConv2d(in_ch, 192, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        bd = self.branch7x7dbl_3(self.branch7x7dbl_2(bd))
        bd = self.branch7x7dbl_5(self.branch7x7dbl_4(bd))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class _InceptionD(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionD, self).__init__()
        self.branch3x3_1 = _BasicConv2d(in_ch, 192, 1)
        self.branch3x3_2 = _BasicConv2d(192, 320, 3, stride=2)
        self.branch7x7x3_1 = _BasicConv2d(in_ch, 192, 1)
        self.branch7x7x3_2 = _BasicConv2d(192, 192, (1, 7), padding=(0, 3))
        self.branch7x7x3_3 = _BasicConv2d(192, 192, (7, 1), padding=(3, 0))
        self.branch7x7x3_4 = _BasicConv2d(192, 192, 3, stride=2)

    def forward(self, x):
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_2(self.branch7x7x3_1(x))
        b7 = self.branch7x7x3_4(self.branch7x7x3_3(b7))
        bp = F.max_pool2d(x, 3, stride=2)
        return torch.cat([b3, b7, bp], 1)


class _InceptionE(nn.Module):
    def __init__(self, in_ch):
        super(_InceptionE, self).__init__()
        self.branch1x1 = _BasicConv2d(in_ch, 320, 1)
        self.branch3x3_1 = _BasicConv2d(in_ch, 384, 1)
        self.branch3x3_2a = _BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3_2b = _BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = _BasicConv2d(in_ch, 448, 1)
        self.branch3x3dbl_2 = _BasicConv2d(448, 384, 3, padding=1)
        self.branch3x3dbl_3a = _BasicConv2d(384, 384, (1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = _BasicConv2d(384, 384, (3, 1), padding=(1, 0))
        self.branch_pool = _BasicConv2d(in_ch, 192, 1)

    def forward(self, x):
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)],
                       1)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class Inception3(nn.Module):
    """torchvision Inception-v3 without the auxiliary head (23.83 M)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(Inception3, self).__init__()
        self.Conv2d_1a_3x3 = _BasicConv2d(3, 32, 3, stride=2)
        self.Conv2d_2a_3x3 = _BasicConv2d(32, 32, 3)
        self.Conv2d_2b_3x3 = _BasicConv2d(32, 64, 3, padding=1)
        self.Conv2d_3b_1x1 = _BasicConv2d(64, 80, 1)
        self.Conv2d_4a_3x3 = _BasicConv2d(80, 192, 3)
        self.Mixed_5b = _InceptionA(192, pool_features=32)
        self.Mixed_5c = _InceptionA(256, pool_features=64)
        self.Mixed_5d = _InceptionA(288, pool_features=64)
        self.Mixed_6a = _InceptionB(288)
        self.Mixed_6b = _InceptionC(768, c7=128)
        self.Mixed_6c = _InceptionC(768, c7=160)
        self.Mixed_6d = _InceptionC(768, c7=160)
        self.Mixed_6e = _InceptionC(768, c7=192)
        self.Mixed_7a = _InceptionD(768)
        self.Mixed_7b = _InceptionE(1280)
        self.Mixed_7c = _InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.5)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = F.max_pool2d(x, 3, stride=2)
        x = self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x))
        x = F.max_pool2d(x, 3, stride=2)
        x = self.Mixed_5d(self.Mixed_5c(self.Mixed_5b(x)))
        x = self.Mixed_6a(x)
        x = self.Mixed_6e(self.Mixed_6d(self.Mixed_6c(self.Mixed_6b(x))))
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        x = self.dropout(self.avgpool(x))
        return self.fc(_flatten(x))


class LeNet(nn.Module):
    """tf_cnn_benchmarks lenet on 3x28x28 inputs (see the module notes)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(LeNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(_flatten(x)))
        return self.fc2(x)


class Trivial(nn.Module):
    """A tiny model for smoke tests (not a benchmark)."""

    def __init__(self, num_classes=NUM_CLASSES):
        super(Trivial, self).__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(_flatten(x))


def _resnet(block, layers, v15):
    return lambda: ResNet(block, layers, stride_on_3x3=v15)


# name -> (constructor, default input size (C, H, W))
_MODELS = {
    "alexnet": (AlexNet, (3, 224, 224)),
    "resnet18": (_resnet(_BasicBlock, [2, 2, 2, 2], False), (3, 224, 224)),
    "resnet34": (_resnet(_BasicBlock, [3, 4, 6, 3], False), (3, 224, 224)),
    "resnet50": (_resnet(_Bottleneck, [3, 4, 6, 3], False), (3, 224, 224)),
    "resnet101": (_resnet(_Bottleneck, [3, 4, 23, 3], False), (3, 224, 224)),
    "resnet152": (_resnet(_Bottleneck, [3, 8, 36, 3], False), (3, 224, 224)),
    "resnet50_v1.5": (_resnet(_Bottleneck, [3, 4, 6, 3], True),
                      (3, 224, 224)),
    "resnet101_v1.5": (_resnet(_Bottleneck, [3, 4, 23, 3], True),
                       (3, 224, 224)),
    "resnet152_v1.5": (_resnet(_Bottleneck, [3, 8, 36, 3], True),
                       (3, 224, 224)),
    "vgg16": (VGG16, (3, 224, 224)),
    "inception3": (Inception3, (3, 299, 299)),
    "lenet": (LeNet, (3, 28, 28)),
    "trivial": (Trivial, (3, 32, 32)),
}

MODEL_NAMES = ("alexnet", "resnet18", "resnet34", "resnet50", "resnet101",
               "resnet152", "resnet50_v1.5", "resnet101_v1.5",
               "resnet152_v1.5", "vgg16", "inception3", "lenet", "trivial")


def _check_model_name(name):
    if name not in _MODELS:
        raise HarnessError("unknown model %r (choose from: %s)"
                           % (name, ", ".join(MODEL_NAMES)))


def build_model(name):
    """A fresh ``nn.Module`` for model ``name`` (1000 classes, on CPU)."""
    _check_model_name(name)
    return _MODELS[name][0]()


def default_image_size(name):
    """Default input size of model ``name`` as a (C, H, W) tuple."""
    _check_model_name(name)
    return _MODELS[name][1]


def count_params(model):
    """Number of parameters (weights and biases, not buffers)."""
    return int(sum(p.numel() for p in model.parameters()))


def _chw(image_size):
    if isinstance(image_size, int):
        return (3, image_size, image_size)
    size = tuple(int(v) for v in image_size)
    if len(size) == 2:
        return (3,) + size
    if len(size) != 3:
        raise ValueError("image_size must be H, (H, W) or (C, H, W)")
    return size


def count_forward_macs(model, image_size):
    """Multiply-adds of convolutions and fully connected layers for one
    image of ``image_size`` ((C, H, W), (H, W) or an int), counted with
    forward hooks on a one-image forward pass in eval mode."""
    c, h, w = _chw(image_size)
    total = [0]

    def conv_hook(module, inputs, output):
        kh, kw = module.kernel_size
        per_output = (module.in_channels // module.groups) * kh * kw
        total[0] += int(output[0].numel()) * per_output

    def linear_hook(module, inputs, output):
        rows = int(output[0].numel()) // module.out_features
        total[0] += rows * module.in_features * module.out_features

    handles = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
    was_training = model.training
    device = None
    for p in model.parameters():
        device = p.device
        break
    try:
        model.eval()
        with torch.no_grad():
            x = torch.zeros(1, c, h, w)
            if device is not None:
                x = x.to(device)
            model(x)
    finally:
        for hd in handles:
            hd.remove()
        model.train(was_training)
    return total[0]


def _meta_model(name):
    """Model ``name`` built without allocating or initialising weights, if
    this PyTorch can (torch.device as a context manager); else None."""
    device_cls = getattr(torch, "device", None)
    if device_cls is None or not hasattr(device_cls, "__enter__"):
        return None
    try:
        with torch.device("meta"):
            return build_model(name)
    except Exception:
        return None


def describe_model(name):
    """The ``--describe`` record of model ``name`` as a dict."""
    size = default_image_size(name)
    model = _meta_model(name)
    macs = None
    if model is not None:
        try:
            macs = count_forward_macs(model, size)
        except Exception:
            model = None
    if model is None:
        model = build_model(name)
        macs = count_forward_macs(model, size)
    return {
        "model": name,
        "params": count_params(model),
        "forward_macs": int(macs),
        "image_size": list(size),
        "num_classes": NUM_CLASSES,
    }


# ---------------------------------------------------------------------------
# Feature checks (guards for old PyTorch; ``torch_mod`` is replaceable)
# ---------------------------------------------------------------------------

def resolve_amp(device_type, torch_mod=torch):
    """For --precision amp: (autocast context factory, dtype name,
    needs a gradient scaler).  Raises HarnessError (exit 2) where this
    PyTorch cannot autocast on ``device_type``."""
    autocast = getattr(torch_mod, "autocast", None)
    if device_type == "cuda":
        dtype = getattr(torch_mod, "float16", None)
        if autocast is not None and dtype is not None:
            return (lambda: autocast(device_type="cuda", dtype=dtype),
                    "float16", True)
        cuda_amp = getattr(getattr(torch_mod, "cuda", None), "amp", None)
        legacy = getattr(cuda_amp, "autocast", None)
        if legacy is not None:
            return (lambda: legacy(), "float16", True)
        raise HarnessError("--precision amp: this PyTorch has no CUDA "
                           "autocast (torch.autocast / torch.cuda.amp)")
    dtype = getattr(torch_mod, "bfloat16", None)
    if autocast is None or dtype is None:
        raise HarnessError("--precision amp: this PyTorch has no CPU bfloat16 "
                           "autocast (torch.autocast)")
    return (lambda: autocast(device_type="cpu", dtype=dtype), "bfloat16",
            False)


def make_grad_scaler(torch_mod=torch):
    """A float16 gradient scaler for CUDA, newest API first."""
    amp = getattr(torch_mod, "amp", None)
    scaler_cls = getattr(amp, "GradScaler", None)
    if scaler_cls is not None:
        try:
            return scaler_cls("cuda")
        except TypeError:
            pass
    cuda_amp = getattr(getattr(torch_mod, "cuda", None), "amp", None)
    scaler_cls = getattr(cuda_amp, "GradScaler", None)
    if scaler_cls is not None:
        return scaler_cls()
    raise HarnessError("--precision amp: this PyTorch has no GradScaler")


def resolve_channels_last(mode, precision, device_type, torch_mod=torch):
    """Whether to use channels-last (NHWC) memory format."""
    supported = hasattr(torch_mod, "channels_last")
    if mode == "off":
        return False
    if mode == "on":
        if not supported:
            raise HarnessError("--channels-last on: this PyTorch has no "
                               "torch.channels_last")
        return True
    wanted = (device_type == "cuda" or precision == "amp"
              or mkldnn_available(torch_mod))
    return bool(wanted and supported)


def maybe_compile(model, requested, torch_mod=torch):
    """(model, compiled): torch.compile(model) when requested and possible."""
    if not requested:
        return model, False
    compile_fn = getattr(torch_mod, "compile", None)
    if compile_fn is None:
        sys.stderr.write("dlrun-harness: warning: --compile: this PyTorch has "
                         "no torch.compile; running eagerly\n")
        return model, False
    return compile_fn(model), True


def mkldnn_available(torch_mod=torch):
    """Whether oneDNN (mkldnn) CPU kernels are available."""
    mkldnn = getattr(getattr(torch_mod, "backends", None), "mkldnn", None)
    is_available = getattr(mkldnn, "is_available", None)
    if is_available is None:
        return False
    try:
        return bool(is_available())
    except Exception:
        return False


# ---------------------------------------------------------------------------
# Process layout
# ---------------------------------------------------------------------------

def _env_int(environ, key, source):
    value = environ.get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HarnessError("bad %s=%r in the environment (%s)"
                           % (key, value, source))


def detect_rank_env(environ=None):
    """(rank, world_size, local_rank or None, source) from the launcher's
    environment: torchrun, Open MPI, PMIx, Slurm, else one process."""
    env = os.environ if environ is None else environ
    rank = size = local = None
    source = "single"
    if "RANK" in env and "WORLD_SIZE" in env:
        source = "torchrun"
        rank = _env_int(env, "RANK", source)
        size = _env_int(env, "WORLD_SIZE", source)
        if "LOCAL_RANK" in env:
            local = _env_int(env, "LOCAL_RANK", source)
    elif "OMPI_COMM_WORLD_RANK" in env and "OMPI_COMM_WORLD_SIZE" in env:
        source = "openmpi"
        rank = _env_int(env, "OMPI_COMM_WORLD_RANK", source)
        size = _env_int(env, "OMPI_COMM_WORLD_SIZE", source)
        if "OMPI_COMM_WORLD_LOCAL_RANK" in env:
            local = _env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", source)
    elif "PMIX_RANK" in env and ("OMPI_COMM_WORLD_SIZE" in env
                                 or "SLURM_NTASKS" in env):
        source = "pmix"
        rank = _env_int(env, "PMIX_RANK", source)
        size_key = ("OMPI_COMM_WORLD_SIZE" if "OMPI_COMM_WORLD_SIZE" in env
                    else "SLURM_NTASKS")
        size = _env_int(env, size_key, source)
        for key in ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
            if key in env:
                local = _env_int(env, key, source)
                break
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        source = "slurm"
        rank = _env_int(env, "SLURM_PROCID", source)
        size = _env_int(env, "SLURM_NTASKS", source)
        if "SLURM_LOCALID" in env:
            local = _env_int(env, "SLURM_LOCALID", source)
    else:
        rank, size, local = 0, 1, 0
    if size < 1 or rank < 0 or rank >= size:
        raise HarnessError("inconsistent rank %d / world size %d (%s)"
                           % (rank, size, source))
    return rank, size, local, source


# ---------------------------------------------------------------------------
# Benchmark
# ---------------------------------------------------------------------------

class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(ERROR_PREFIX + message + "\n")
        sys.exit(EXIT_USAGE)


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % text)
    return value


def _non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % text)
    return value


def build_parser():
    p = _ArgumentParser(
        prog="dlrun-harness",
        description="Synthetic-data PyTorch training benchmark "
                    "(tf_cnn_benchmarks-style).")
    p.add_argument("--model", default="resnet50_v1.5", choices=MODEL_NAMES)
    p.add_argument("--describe", action="store_true",
                   help="print the model's parameters and forward "
                        "multiply-adds as one JSON line and exit")
    p.add_argument("--batch-size", type=_positive, default=32,
                   help="images per rank and step (default 32)")
    p.add_argument("--steps", type=_positive, default=100,
                   help="timed steps (default 100)")
    p.add_argument("--warmup-steps", type=_non_negative, default=10,
                   help="untimed warm-up steps (default 10)")
    p.add_argument("--precision", choices=("fp32", "amp"), default="fp32")
    p.add_argument("--channels-last", choices=("auto", "on", "off"),
                   default="auto")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   default="auto")
    p.add_argument("--threads", type=_positive, default=None,
                   help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--expected-world-size", type=_positive, default=None)
    p.add_argument("--backend", choices=("auto", "gloo", "nccl", "mpi"),
                   default="auto")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--display-every", type=_positive, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--data-workers", type=_non_negative, default=0,
                   help="recorded only: synthetic data needs no loaders")
    p.add_argument("--compile", action="store_true",
                   help="use torch.compile where available")
    p.add_argument("--benchmark", choices=("train", "allreduce"),
                   default="train",
                   help="train (default) or allreduce: all-reduce bus "
                        "bandwidth over message sizes, --steps timed and "
                        "--warmup-steps untimed iterations per size")
    p.add_argument("--min-bytes", type=_positive, default=8,
                   help="allreduce: smallest message (default 8)")
    p.add_argument("--max-bytes", type=_positive, default=64 * 1024 * 1024,
                   help="allreduce: largest message (default 64 MiB)")
    p.add_argument("--size-factor", type=_positive, default=2,
                   help="allreduce: size multiplier between messages "
                        "(default 2)")
    p.add_argument("--allocator", choices=ALLOCATOR_CHOICES, default="auto",
                   help="memory allocator: auto (tcmalloc, else jemalloc, "
                        "else glibc-tuned), tcmalloc, jemalloc, glibc-tuned "
                        "(glibc that keeps freed memory) or system (the C "
                        "library's malloc untouched); default auto")
    p.add_argument("--timeout-s", type=_positive, default=None,
                   help="collective timeout in seconds (dlrun: the run's "
                        "time limit), so that one stopped rank ends the "
                        "job; default PyTorch's")
    return p


def _out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _error_line(message):
    message = " ".join(str(message).split())  # always exactly one line
    sys.stderr.write(ERROR_PREFIX + message + "\n")
    sys.stderr.flush()


def _resolve_device(choice):
    cuda_ok = torch.cuda.is_available()
    if choice == "cuda" and not cuda_ok:
        raise HarnessError("--device cuda: no CUDA device is available")
    if choice == "auto":
        return "cuda" if cuda_ok else "cpu"
    return choice


def _resolve_backend(choice, device_type):
    if choice == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if choice == "nccl" and device_type != "cuda":
        raise HarnessError("--backend nccl needs --device cuda")
    return choice


def _dist():
    import torch.distributed as dist
    is_available = getattr(dist, "is_available", None)
    if is_available is not None and not is_available():
        raise HarnessError("this PyTorch was built without torch.distributed")
    return dist


def _reduce_op(dist, name):
    ops = getattr(dist, "ReduceOp", None) or getattr(dist, "reduce_op")
    return getattr(ops, name)


class _Comm(object):
    """The few collectives the harness needs; no-ops for one process."""

    def __init__(self, rank, world_size, backend, device, timeout_s=None):
        self.timeout_s = timeout_s
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.dist = None
        # nccl communicates CUDA tensors only
        self.device = device if backend == "nccl" else torch.device("cpu")

    def init(self):
        if self.world_size == 1:
            return
        dist = _dist()
        check = getattr(dist, "is_%s_available" % self.backend, None)
        if check is not None and not check():
            raise HarnessError("backend %s is not available in this PyTorch"
                               % self.backend)
        if self.backend == "mpi":
            dist.init_process_group("mpi")
        else:
            addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
            port = os.environ.get("MASTER_PORT", "29500")
            extra = {}
            if self.timeout_s:
                extra["timeout"] = datetime.timedelta(seconds=self.timeout_s)
            dist.init_process_group(
                self.backend, init_method="tcp://%s:%s" % (addr, port),
                rank=self.rank, world_size=self.world_size, **extra)
        self.dist = dist

    def barrier(self):
        if self.dist is not None:
            self.dist.barrier()

    def all_reduce(self, values, op):
        """Element-wise reduction ("MAX", "MIN", "SUM") of a list of floats."""
        if self.dist is None:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        self.dist.all_reduce(t, op=_reduce_op(self.dist, op))
        return [float(v) for v in t.cpu().tolist()]

    def all_gather(self, values):
        """One list of floats per rank, in rank order."""
        if self.dist is None:
            return [list(values)]
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        parts = [torch.zeros_like(t) for _ in range(self.world_size)]
        self.dist.all_gather(parts, t)
        return [[float(v) for v in part.cpu().tolist()] for part in parts]

    def destroy(self):
        if self.dist is not None:
            self.dist.destroy_process_group()
            self.dist = None


def _wrap_ddp(model, device):
    ddp = torch.nn.parallel.DistributedDataParallel
    if device.type == "cuda":
        return ddp(model, device_ids=[device.index],
                   output_device=device.index)
    try:
        return ddp(model)
    except Exception:
        # The oldest PyTorch releases have a separate CPU wrapper.
        legacy = getattr(torch.nn.parallel, "DistributedDataParallelCPU",
                         None)
        if legacy is None:
            raise
        return legacy(model)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def perf_stats(batch, step_times):
    """tf_cnn_benchmarks statistics: (mean rate, standard error, jitter)."""
    times = [t for t in step_times if t > 0]
    if not times:
        return 0.0, 0.0, 0.0
    speeds = [batch / t for t in times]
    n = len(speeds)
    mean = batch * n / sum(times)
    avg = sum(speeds) / n
    std = math.sqrt(sum((s - avg) ** 2 for s in speeds) / n)
    med = _median(speeds)
    jitter = 1.4826 * _median([abs(s - med) for s in speeds])
    return mean, std / math.sqrt(n), jitter


def _median(values):
    v = sorted(values)
    n = len(v)
    mid = n // 2
    return v[mid] if n % 2 else 0.5 * (v[mid - 1] + v[mid])


def param_checksum(module):
    """(sum, sum of absolute values) of all parameters, in float64."""
    total = 0.0
    total_abs = 0.0
    with torch.no_grad():
        for p in module.parameters():
            d = p.detach().double()
            total += float(d.sum())
            total_abs += float(d.abs().sum())
    return [total, total_abs]


def replicas_agree(cmax, cmin, rtol=REPLICA_RTOL):
    """Whether element-wise MAX and MIN over ranks of the checksum agree to
    ``rtol`` of the absolute-value sum."""
    scale = max(abs(cmax[1]), abs(cmin[1]), 1e-30)
    return all(abs(a - b) <= rtol * scale for a, b in zip(cmax, cmin))


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or platform.machine() or "cpu"


def _versions(device_type):
    info = {
        "framework": "pytorch",
        "framework_version": str(torch.__version__),
        "python_version": platform.python_version(),
    }
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    if cuda:
        info["cuda_version"] = str(cuda)
    if device_type == "cuda":
        cudnn = getattr(torch.backends, "cudnn", None)
        try:
            v = cudnn.version() if cudnn is not None else None
        except Exception:
            v = None
        if v:
            info["cudnn_version"] = str(v)
        nccl = getattr(torch.cuda, "nccl", None)
        try:
            v = nccl.version() if nccl is not None else None
        except Exception:
            v = None
        if v:
            if isinstance(v, (tuple, list)):
                v = ".".join(str(x) for x in v)
            info["nccl_version"] = str(v)
    return info


def _run_fields(device_type):
    """Result fields every benchmark shares: allocator, versions, status."""
    fields = {
        "allocator": ALLOCATOR["name"],
        "allocator_library": ALLOCATOR["library"],
        "harness_version": HARNESS_VERSION,
        "status": "ok",
    }
    fields.update(_versions(device_type))
    return fields


def _maybe_perturb(module, rank):
    """The documented test hook (see the module notes)."""
    value = os.environ.get(PERTURB_ENV)
    if value is None or value.strip() != str(rank):
        return
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)
            break


def _setup_process(args):
    """What every benchmark does first: check the world size, settle the
    allocator and threads, pick the device and the backend."""
    rank, world_size, local_rank, rank_source = detect_rank_env()
    if (args.expected_world_size is not None
            and args.expected_world_size != world_size):
        raise HarnessError(
            "expected world size %d but found %d (rank %d, rank source: "
            "%s); check the launcher's process count"
            % (args.expected_world_size, world_size, rank, rank_source),
            EXIT_WORLD_SIZE)
    if ALLOCATOR["name"] is None or args.allocator not in ("auto",
                                                           ALLOCATOR["name"]):
        setup_allocator(args.allocator, allow_exec=False)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device_type = _resolve_device(args.device)
    if device_type == "cuda":
        count = torch.cuda.device_count()
        index = (local_rank if local_rank is not None else rank) % count
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        torch.backends.cudnn.benchmark = True
        device_name = torch.cuda.get_device_name(index)
    else:
        device = torch.device("cpu")
        device_name = _cpu_name()
    backend = _resolve_backend(args.backend, device_type)
    return (rank, world_size, rank_source, device_type, device, device_name,
            backend)


def _in_process_group(comm, work, *args):
    """work(*args) inside the process group, which is torn down after it.
    On an exception with a live group: report and leave at once - never let
    interpreter shutdown run a process group's destructors (with a live DDP
    model they hang or abort)."""
    comm.init()
    try:
        outcome = work(*args)
    except BaseException:
        if comm.dist is not None:
            _leave_now(sys.exc_info())
        raise
    # work has returned: what it built (model, optimizer, buffers) is
    # unreferenced now.
    gc.collect()
    comm.destroy()
    return outcome


def run_benchmark(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = _setup_process(args)

    if args.precision == "amp":
        autocast, amp_dtype, needs_scaler = resolve_amp(device_type)
    else:
        autocast, amp_dtype, needs_scaler = _NullContext, None, False
    channels_last = resolve_channels_last(args.channels_last, args.precision,
                                          device_type)

    comm = _Comm(rank, world_size, backend, device, args.timeout_s)
    outcome = _in_process_group(comm, _train, args, comm, device, autocast,
                                needs_scaler, channels_last)
    if outcome["error"] is not None:
        message, code = outcome["error"]
        if rank == 0:
            _error_line(message)
        return code

    timing = outcome["timing"]
    total = timing["total"]
    result = {
        "metric": "throughput",
        "value": total,
        "unit": "images/sec",
        "formula": "world_size*batch_size_per_rank*timed_steps/wall_time_s",
        "wall_time_reduction": "max_over_ranks",
        "per_rank_images_per_sec": timing["per_rank_rates"],
        "per_rank_wall_time_s": timing["per_rank_walls"],
        "wall_time_s": timing["wall"],
        "world_size": world_size,
        "rank_source": rank_source,
        "num_devices": world_size,
        "model": args.model,
        "params": outcome["params"],
        "image_size": list(default_image_size(args.model)),
        "num_classes": NUM_CLASSES,
        "batch_size_per_rank": args.batch_size,
        "global_batch_size": args.batch_size * world_size,
        "timed_steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "precision": args.precision,
        "amp_dtype": amp_dtype,
        "channels_last": channels_last,
        "data_format": "NHWC" if channels_last else "NCHW",
        "compiled": outcome["compiled"],
        "device": device_type,
        "device_name": device_name,
        "threads": torch.get_num_threads(),
        "mkldnn": mkldnn_available(),
        "backend": backend if world_size > 1 else "none",
        "optimizer": "sgd",
        "lr": args.lr,
        "momentum": args.momentum,
        "seed": args.seed,
        "data_workers": args.data_workers,
        "final_loss": outcome["final_loss"],
    }
    result.update(_run_fields(device_type))
    if rank == 0:
        _out(RULE)
        _out("total images/sec: %.2f" % total)
        _out(RULE)
        _out("DLRUN_RESULT " + json.dumps(result, sort_keys=True))
    return 0


# --- All-reduce bus bandwidth ------------------------------------------------


def message_sizes(min_bytes, max_bytes, factor=2):
    """min_bytes, min_bytes*factor, ... up to max_bytes (as nccl-tests -b -e
    -f), each rounded down to whole float32 elements (at least one)."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise HarnessError("message sizes: need 4 <= --min-bytes <= "
                           "--max-bytes and --size-factor >= 2, got %d, %d, "
                           "%d" % (min_bytes, max_bytes, factor))
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size // 4 * 4)
        size *= factor
    return sizes


def bus_bandwidth(nbytes, seconds, world_size):
    """(algbw, busbw) in GB/s, nccl-tests' definitions for all-reduce:
    algbw = bytes / time; busbw = algbw * 2 (n - 1) / n, the rate each link
    carries in a ring, comparable across rank counts and with the hardware."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2.0 * (world_size - 1) / world_size


def run_allreduce(args):
    (rank, world_size, rank_source, device_type, device, device_name,
     backend) = _setup_process(args)
    if world_size < 2:
        raise HarnessError(
            "--benchmark allreduce needs at least 2 ranks, found 1; start "
            "it with 2 or more processes (e.g. mpirun -np 2, torchrun "
            "--nproc-per-node 2)")
    sizes = message_sizes(args.min_bytes, args.max_bytes, args.size_factor)
    comm = _Comm(rank, world_size, backend, device, args.timeout_s)
    rows = _in_process_group(comm, _allreduce_sweep, args, comm, device,
                             sizes)
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        bad = [r["bytes"] for r in rows if r["wrong"]]
        if rank == 0:
            _error_line("all-reduce returned wrong values: %d elements over "
                        "all ranks, at message sizes %s bytes"
                        % (wrong, bad))
        return EXIT_WRONG_RESULT
    largest = rows[-1]
    avg_busbw = sum(r["busbw_gbs"] for r in rows) / len(rows)
    result = {
        "benchmark": "allreduce",
        "metric": "busbw",
        "value": largest["busbw_gbs"],
        "unit": "GB/s",
        "formula": "busbw = bytes/time * 2*(world_size-1)/world_size at the "
                   "largest message; time = max over ranks of the mean time "
                   "of one all-reduce",
        "time_reduction": "max_over_ranks",
        "op": "sum",
        "dtype": "float32",
        "in_place": True,
        "largest_bytes": largest["bytes"],
        "avg_busbw": avg_busbw,
        "sizes": rows,
        "iterations": args.steps,
        "warmup_iterations": args.warmup_steps,
        "world_size": world_size,
        "num_devices": world_size,
        "rank_source": rank_source,
        "device": device_type,
        "device_name": device_name,
        "backend": backend,
        "threads": torch.get_num_threads(),
    }
    result.update(_run_fields(device_type))
    if rank == 0:
        _out("# Avg bus bandwidth    : %.4f" % avg_busbw)
        _out(RULE)
        _out("DLRUN_RESULT " + json.dumps(result, sort_keys=True))
    return 0


def _allreduce_sweep(args, comm, device, sizes):
    """Time `--steps` in-place float32 sum all-reduces per message size after
    `--warmup-steps` untimed ones, then check one all-reduce of known values
    (rank r contributes r + 1 everywhere; every element must be
    n (n + 1) / 2).  Timed buffers hold zeros, so repeated reduction never
    overflows and the values cannot change the speed."""
    dist, rank, world_size = comm.dist, comm.rank, comm.world_size
    expected = world_size * (world_size + 1) / 2.0
    if rank == 0:
        _out("PyTorch:     %s" % torch.__version__)
        _out("Benchmark:   all-reduce (sum, float32, in place), %d ranks, "
             "backend %s" % (world_size, comm.backend))
        _out("Iterations:  %d timed, %d warm-up per size"
             % (args.steps, args.warmup_steps))
        _out("#%12s %14s %8s %6s %12s %8s %8s %8s"
             % ("size", "count", "type", "redop", "time", "algbw", "busbw",
                "#wrong"))
        _out("#%12s %14s %8s %6s %12s %8s %8s %8s"
             % ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
    rows = []
    for nbytes in sizes:
        count = max(nbytes // 4, 1)
        buf = torch.zeros(count, dtype=torch.float32, device=device)
        for _ in range(args.warmup_steps):
            dist.all_reduce(buf)
        _sync(device)
        comm.barrier()
        _sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            dist.all_reduce(buf)
        _sync(device)
        local = (time.perf_counter() - start) / args.steps
        buf.fill_(rank + 1.0)
        if os.environ.get(PERTURB_ENV) == str(rank):
            buf[0] += 1.0  # test hook: a wrong contribution
        dist.all_reduce(buf)
        local_wrong = int((buf != expected).sum().item())
        del buf
        seconds = comm.all_reduce([local], "MAX")[0]
        wrong = int(comm.all_reduce([float(local_wrong)], "SUM")[0])
        algbw, busbw = bus_bandwidth(count * 4, seconds, world_size)
        rows.append({"bytes": count * 4, "count": count,
                     "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": busbw, "wrong": wrong})
        if rank == 0:
            _out(" %12d %14d %8s %6s %12.2f %8.3f %8.3f %8d"
                 % (count * 4, count, "float", "sum", seconds * 1e6, algbw,
                    busbw, wrong))
    comm.barrier()
    return rows


def _leave_now(exc_info):
    exc = exc_info[1]
    if isinstance(exc, HarnessError):
        _error_line(exc.message)
        code = exc.code
    elif isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else EXIT_UNEXPECTED
    else:
        traceback.print_exception(*exc_info)
        _error_line("%s: %s" % (type(exc).__name__, exc))
        code = EXIT_UNEXPECTED
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _train(args, comm, device, autocast, needs_scaler, channels_last):
    """Build, warm up, time and check.  All references to the model and the
    optimizer live in this frame, so they are gone when it returns."""
    rank, world_size = comm.rank, comm.world_size
    torch.manual_seed(args.seed)
    model = build_model(args.model)
    params = count_params(model)
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    raw_model = model
    if world_size > 1:
        model = _wrap_ddp(model, device)
    model, compiled = maybe_compile(model, args.compile)
    optimizer = torch.optim.SGD(raw_model.parameters(), lr=args.lr,
                                momentum=args.momentum)
    scaler = make_grad_scaler() if needs_scaler else None
    criterion = nn.CrossEntropyLoss().to(device)

    gen = torch.Generator()
    gen.manual_seed(args.seed + rank)
    c, h, w = default_image_size(args.model)
    images = torch.randn(args.batch_size, c, h, w, generator=gen)
    labels = torch.randint(0, NUM_CLASSES, (args.batch_size,), generator=gen,
                           dtype=torch.long)
    images = images.to(device)
    labels = labels.to(device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    model.train()

    def step():
        optimizer.zero_grad()
        with autocast():
            loss = criterion(model(images), labels)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss.detach()

    global_batch = args.batch_size * world_size
    # One device per rank: /gpu:<index> or /cpu:0, as tf_cnn_benchmarks.
    index = device.index if device.type == "cuda" else 0
    kind = "gpu" if device.type == "cuda" else "cpu"
    devices = ["/%s:%d" % (kind, int(g[0]))
               for g in comm.all_gather([float(index)])]
    if rank == 0:
        _out("PyTorch:     %s" % torch.__version__)
        _out("Model:       %s" % args.model)
        _out("Dataset:     imagenet (synthetic)")
        _out("Mode:        training")
        _out("Batch size:  %d global" % global_batch)
        _out("             %d per device" % args.batch_size)
        _out("Num batches: %d" % args.steps)
        _out("Devices:     %s" % devices)
        _out("Data format: %s" % ("NHWC" if channels_last else "NCHW"))
        _out("Precision:   %s" % args.precision)
        _out("Optimizer:   sgd")
        library = ALLOCATOR["library"]
        _out("Allocator:   %s%s" % (ALLOCATOR["name"],
                                    " (%s)" % library if library else ""))
        _out("Variables:   %s" % ("ddp" if world_size > 1 else "replicated"))
        _out("==========")
        _out("Running warm up")
    for _ in range(args.warmup_steps):
        step()
    _sync(device)
    comm.barrier()
    _sync(device)
    if rank == 0:
        _out("Done warm up")
        _out("Step\tImg/sec\ttotal_loss")

    step_times = []
    loss = None
    start = time.perf_counter()
    last = start
    for i in range(args.steps):
        loss = step()
        _sync(device)
        now = time.perf_counter()
        step_times.append(now - last)
        n = i + 1
        if n == 1 or n % args.display_every == 0:
            value = float(loss)
            if rank == 0:
                rate, err, jitter = perf_stats(global_batch, step_times)
                _out("%d\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f"
                     % (n, rate, err, jitter, value))
            if world_size == 1 and not _finite(value):
                raise HarnessError("loss is not finite (%r) at step %d"
                                   % (value, n), EXIT_NONFINITE)
            last = time.perf_counter()
        else:
            last = now
    _sync(device)
    wall = time.perf_counter() - start
    final_loss = float(loss)

    outcome = {"error": None, "params": params, "compiled": compiled,
               "final_loss": final_loss}
    # Collective checks: every rank reaches the same verdict.
    bad_loss = comm.all_reduce([0.0 if _finite(final_loss) else 1.0],
                               "MAX")[0]
    if bad_loss:
        outcome["error"] = ("loss is not finite (rank 0: %r) after %d steps"
                            % (final_loss, args.steps), EXIT_NONFINITE)
    if world_size > 1 and outcome["error"] is None:
        _maybe_perturb(raw_model, rank)
        checksum = param_checksum(raw_model)
        cmax = comm.all_reduce(checksum, "MAX")
        cmin = comm.all_reduce(checksum, "MIN")
        if not replicas_agree(cmax, cmin):
            outcome["error"] = (
                "replicas diverged: parameter checksums (sum, abs sum) "
                "differ across %d ranks: max %r, min %r (relative "
                "tolerance %g)" % (world_size, cmax, cmin, REPLICA_RTOL),
                EXIT_DIVERGED)

    if outcome["error"] is None:
        rate = args.batch_size * args.steps / wall
        gathered = comm.all_gather([rate, wall])
        max_wall = comm.all_reduce([wall], "MAX")[0]
        outcome["timing"] = {
            "per_rank_rates": [g[0] for g in gathered],
            "per_rank_walls": [g[1] for g in gathered],
            "wall": max_wall,
            "total": world_size * args.batch_size * args.steps / max_wall,
        }
    # Clean teardown: no rank may destroy the process group while a DDP
    # model is alive anywhere, so meet first, then drop every reference.
    comm.barrier()
    del model, raw_model, optimizer, scaler, step, images, labels, loss
    gc.collect()
    return outcome


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.describe:
            _out(json.dumps(describe_model(args.model), sort_keys=True))
            return 0
        if args.benchmark == "allreduce":
            return run_allreduce(args)
        return run_benchmark(args)
    except HarnessError as exc:
        _error_line(exc.message)
        return exc.code
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        traceback.print_exc()
        _error_line("%s: %s" % (type(exc).__name__, exc))
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
