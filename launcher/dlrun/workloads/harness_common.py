"""dlrun harnesses: what every framework's harness shares - exit codes, the
error type, the output helpers, the command-line number types, the host's
CPU name and tf_cnn_benchmarks' throughput statistics.  Standard library
only: the PyTorch entry imports it before torch, to report a failed
allocator set-up.

Shipped into containers next to ``harness_pytorch.py`` and next to
``harness_tensorflow.py`` (see their notes), so that both report failures,
exit codes and statistics alike; runs on Python >= 3.6.
"""

import argparse
import math
import platform
import sys
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
EXIT_IMPOSSIBLE = 7


class HarnessError(Exception):
    """An anticipated failure: reported as one line, exits with ``code``."""

    def __init__(self, message, code=EXIT_USAGE):
        Exception.__init__(self, message)
        self.message = message
        self.code = code


class NullContext(object):
    """A do-nothing ``with`` target (contextlib.nullcontext is Python 3.7+)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def out(line=""):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_line(message):
    message = " ".join(str(message).split())  # always exactly one line
    sys.stderr.write(ERROR_PREFIX + message + "\n")
    sys.stderr.flush()


def report_failures(body):
    """``body()``'s exit code; a HarnessError is its one line and its code,
    anything unexpected its traceback, one line and exit 1.  Ctrl-C is not
    caught."""
    try:
        return body()
    except HarnessError as exc:
        error_line(exc.message)
        return exc.code
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        traceback.print_exc()
        error_line("%s: %s" % (type(exc).__name__, exc))
        return EXIT_UNEXPECTED


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one ``dlrun-harness: error:`` line, exit 2."""

    def error(self, message):
        sys.stderr.write(ERROR_PREFIX + message + "\n")
        sys.exit(EXIT_USAGE)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % text)
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % text)
    return value


def cpu_name():
    """The CPU's model name as /proc/cpuinfo gives it (else what platform knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_has_native_bf16(cpuinfo="/proc/cpuinfo"):
    """True where the CPU computes bfloat16 in hardware (x86 AVX512_BF16 or
    AMX-BF16, Arm BF16), False where /proc/cpuinfo says it does not, None
    where it cannot tell."""
    try:
        with open(cpuinfo) as handle:
            text = handle.read(1 << 20)
    except (IOError, OSError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            words = set(value.split())
            return bool(words & {"avx512_bf16", "amx_bf16", "bf16"})
    return None


def median(values):
    v = sorted(values)
    n = len(v)
    mid = n // 2
    return v[mid] if n % 2 else 0.5 * (v[mid - 1] + v[mid])


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
    med = median(speeds)
    jitter = 1.4826 * median([abs(s - med) for s in speeds])
    return mean, std / math.sqrt(n), jitter
