"""dlrun PyTorch harness: the memory allocator, settled before torch is
imported.  Standard library only.

glibc's malloc hands every large tensor (activations of tens of MiB) back to
the kernel when it is freed and page-faults it in again on the next step.
On a 2-core CPU that cost ResNet-50 fp32 training about a third of its
throughput (millions of minor faults per run), and how much of it a process
paid depended on its heap layout, so two identical training loops differed
by 10 %.  A caching allocator (tcmalloc, jemalloc) keeps the memory.  The
harness's entry file therefore re-executes itself once, before torch is
imported, with the chosen allocator in LD_PRELOAD (``setup_allocator`` with
``allow_exec``), as Intel's PyTorch CPU launchers do.  Importing this module
changes nothing.
"""

import ctypes
import glob
import os
import sys

from harness_common import HarnessError

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


def argv_allocator(argv):
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
