"""dlrun PyTorch harness: the fused batch norm + ReLU kernel's C source, its
build - once per CPU and C compiler, into a cache folder - and its loading
into this process.  Standard library + torch (its OpenMP runtime); runs on
Python >= 3.6.  What the kernel computes and why: harness_pytorch_bnrelu.py.

The library is loaded with ctypes after torch, so that its OpenMP calls
resolve to PyTorch's own libgomp (already loaded, same soname) and run on
PyTorch's threads, as many as torch.set_num_threads asks.  Where it cannot
be built or loaded (no compiler, another OpenMP runtime), ``fused_kernel``
says why.
"""

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

import torch

from harness_common import HarnessError

#: Environment variable naming the folder for the compiled kernel.
CACHE_ENV = "DLRUN_KERNEL_CACHE"

C_SOURCE = r"""
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows [lo, hi) of this OpenMP thread. */
static void rows_of(long rows, long *lo, long *hi) {
    long n = omp_get_num_threads(), t = omp_get_thread_num();
    long step = (rows + n - 1) / n;
    *lo = t * step < rows ? t * step : rows;
    *hi = *lo + step < rows ? *lo + step : rows;
}

/* g where v > 0 or v is NaN (torch.relu's backward), else 0. */
static inline float pass_grad(float v, float g) {
    uint32_t bits;
    memcpy(&bits, &g, 4);
    bits &= -(uint32_t)!(v <= 0.f);
    memcpy(&g, &bits, 4);
    return g;
}

/* One thread's share of a two-sum reduction over rows: its rows, its row
   of double sums in the shared table, and float sums over the current
   block of 16 rows.  The table is summed in thread order after the
   parallel region, so that the result does not depend on which thread
   finishes first (a run repeats bit for bit). */
typedef struct { long lo, hi, n; double *acc; float *blk; } Part;

static double *table_new(long C) {
    return calloc((size_t)omp_get_max_threads() * 2 * C, sizeof(double));
}

static void table_sum(double *table, long C, double *sums) {
    long n = 2 * C, threads = omp_get_max_threads();
    memset(sums, 0, sizeof(double) * n);
    for (long t = 0; t < threads; t++)
        for (long c = 0; c < n; c++) sums[c] += table[t * n + c];
    free(table);
}

static Part part_open(long rows, long C, double *table) {
    Part p;
    rows_of(rows, &p.lo, &p.hi);
    p.n = 2 * C;
    p.acc = table + omp_get_thread_num() * p.n;
    p.blk = calloc(p.n, sizeof(float));
    return p;
}

/* After row r: a full block (or the last row) goes into the double sums. */
static void part_row_done(Part *p, long r) {
    if (((r - p->lo) & 15) != 15 && r != p->hi - 1) return;
    for (long c = 0; c < p->n; c++) { p->acc[c] += p->blk[c]; p->blk[c] = 0.f; }
}

/* With d = x - shift (shift: the first row, close to the mean, so that
   the variance does not cancel): sums[c] = sum of d, sums[C + c] = sum of
   d * d over the rows. */
void dl_stats(const float *x, long rows, long C, const float *shift,
              double *sums) {
    double *table = table_new(C);
    #pragma omp parallel
    {
        Part p = part_open(rows, C, table);
        float *blk = p.blk;
        for (long r = p.lo; r < p.hi; r++) {
            const float *xr = x + r * C;
            for (long c = 0; c < C; c++) {
                float d = xr[c] - shift[c];
                blk[c] += d;
                blk[C + c] += d * d;
            }
            part_row_done(&p, r);
        }
        free(p.blk);
    }
    table_sum(table, C, sums);
}

/* y = relu((x - mean) * a + beta [+ res]). */
void dl_forward(const float *x, const float *res, long rows, long C,
                const float *mean, const float *a, const float *beta,
                float *y) {
    #pragma omp parallel
    {
        long lo, hi;
        rows_of(rows, &lo, &hi);
        for (long r = lo; r < hi; r++) {
            const float *xr = x + r * C;
            float *yr = y + r * C;
            if (res) {
                const float *rr = res + r * C;
                for (long c = 0; c < C; c++) {
                    float v = (xr[c] - mean[c]) * a[c] + beta[c] + rr[c];
                    yr[c] = v <= 0.f ? 0.f : v;
                }
            } else {
                for (long c = 0; c < C; c++) {
                    float v = (xr[c] - mean[c]) * a[c] + beta[c];
                    yr[c] = v <= 0.f ? 0.f : v;
                }
            }
        }
    }
}

/* dz = dy masked by the ReLU: by y > 0 where y is given (a residual was
   added), else by (x - mean) * a + beta > 0.  sums[c] = sum of dz,
   sums[C + c] = sum of dz * (x - mean); dz is stored where dz_out is
   given. */
void dl_backward_sums(const float *dy, const float *y, const float *x,
                      long rows, long C, const float *mean, const float *a,
                      const float *beta, double *sums, float *dz_out) {
    double *table = table_new(C);
    #pragma omp parallel
    {
        Part p = part_open(rows, C, table);
        float *blk = p.blk;
        for (long r = p.lo; r < p.hi; r++) {
            const float *xr = x + r * C, *gr = dy + r * C;
            if (y) {
                const float *yr = y + r * C;
                float *zr = dz_out + r * C;
                for (long c = 0; c < C; c++) {
                    float dz = pass_grad(yr[c], gr[c]);
                    zr[c] = dz;
                    blk[c] += dz;
                    blk[C + c] += dz * (xr[c] - mean[c]);
                }
            } else {
                for (long c = 0; c < C; c++) {
                    float d = xr[c] - mean[c];
                    float dz = pass_grad(d * a[c] + beta[c], gr[c]);
                    blk[c] += dz;
                    blk[C + c] += dz * d;
                }
            }
            part_row_done(&p, r);
        }
        free(p.blk);
    }
    table_sum(table, C, sums);
}

/* dx = a * dz + k1 * (x - mean) + k0, dz = g masked by (x - mean) * a +
   beta > 0 where masked, else g itself (masked by dl_backward_sums). */
void dl_backward_dx(const float *g, const float *x, long rows, long C,
                    const float *mean, const float *a, const float *beta,
                    const float *k1, const float *k0, int masked,
                    float *dx) {
    #pragma omp parallel
    {
        long lo, hi;
        rows_of(rows, &lo, &hi);
        for (long r = lo; r < hi; r++) {
            const float *xr = x + r * C, *gr = g + r * C;
            float *dr = dx + r * C;
            if (masked) {
                for (long c = 0; c < C; c++) {
                    float d = xr[c] - mean[c];
                    float dz = pass_grad(d * a[c] + beta[c], gr[c]);
                    dr[c] = a[c] * dz + k1[c] * d + k0[c];
                }
            } else {
                for (long c = 0; c < C; c++)
                    dr[c] = a[c] * gr[c] + k1[c] * (xr[c] - mean[c]) + k0[c];
            }
        }
    }
}
"""

#: What the kernel's build and load came to: the library, or why not.
KERNEL = {"lib": None, "why_not": None, "tried": False}


def compiler_flags(machine=None):
    """The C compiler's flags.  x86-64: the machine's own ISA but no
    AVX-512, whose masked loads (gcc's form of the ReLU's select) made the
    backward twice as slow on a Zen 5; 256-bit vectors already saturate
    memory here.  Floating-point contraction is off so that the backward
    recomputes exactly the forward's ``x * a + b``."""
    machine = machine or platform.machine()
    flags = ["-O3", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off"]
    if machine in ("x86_64", "AMD64"):
        flags += ["-march=native", "-mno-avx512f"]
    elif machine in ("ppc64le", "aarch64"):
        flags += ["-mcpu=native"]
    return flags


def cpu_identity():
    """The CPU's model and flags (the compiled kernel is specific to them)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except (IOError, OSError):
        return platform.processor()
    keep = [l for l in lines if l.split(":")[0].strip() in
            ("model name", "flags", "cpu", "Features", "CPU part")]
    return "\n".join(sorted(set(keep)))


def cache_dir(environ=None):
    environ = os.environ if environ is None else environ
    if environ.get(CACHE_ENV):
        return environ[CACHE_ENV]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dlrun", "kernels")


def _compiler():
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _compiler_version(cc):
    try:
        return subprocess.check_output([cc, "--version"],
                                       stderr=subprocess.STDOUT).decode(
            "utf-8", "replace").splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return ""


def build(folder=None):
    """Path of the compiled kernel, compiling it if this CPU and compiler
    have none yet; else raises HarnessError saying why not."""
    cc = _compiler()
    if cc is None:
        raise HarnessError("no C compiler (cc, gcc or $CC) to build it")
    flags = compiler_flags()
    key = hashlib.sha256("\0".join(
        [C_SOURCE, " ".join(flags), _compiler_version(cc),
         cpu_identity()]).encode("utf-8")).hexdigest()[:16]
    folder = folder or cache_dir()
    path = os.path.join(folder, "bn_relu-%s.so" % key)
    if os.path.exists(path):
        return path
    try:
        os.makedirs(folder, exist_ok=True)
        work = tempfile.mkdtemp(prefix="bn_relu-", dir=folder)
    except OSError as exc:
        raise HarnessError("cannot write its cache folder %s: %s"
                           % (folder, exc.strerror or exc))
    try:
        src = os.path.join(work, "bn_relu.c")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        proc = subprocess.run([cc] + flags + [src, "-o", src + ".so"],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            last = proc.stdout.decode("utf-8", "replace").strip()
            raise HarnessError("%s failed: %s" % (
                os.path.basename(cc), last.splitlines()[-1][:200]
                if last else "exit %d" % proc.returncode))
        os.replace(src + ".so", path)  # atomic: ranks may race here
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def _libgomp_paths():
    """The libgomp files mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            return set(line.split()[-1] for line in f if "/libgomp" in line)
    except (IOError, OSError):
        return set()


def _declare(lib):
    p, n, i = ctypes.c_void_p, ctypes.c_long, ctypes.c_int
    lib.dl_stats.argtypes = [p, n, n, p, p]
    lib.dl_forward.argtypes = [p, p, n, n, p, p, p, p]
    lib.dl_backward_sums.argtypes = [p, p, p, n, n, p, p, p, p, p]
    lib.dl_backward_dx.argtypes = [p, p, n, n, p, p, p, p, p, i, p]
    for fn in (lib.dl_stats, lib.dl_forward, lib.dl_backward_sums,
               lib.dl_backward_dx):
        fn.restype = None
    return lib


def fused_kernel():
    """(library, None) once built and loaded in this process, or (None, why
    not).  Tried once per process."""
    if not KERNEL["tried"]:
        KERNEL["tried"] = True
        parallel = getattr(getattr(torch, "__config__", None),
                           "parallel_info", lambda: "")()
        torch_gomp = _libgomp_paths()
        if "OpenMP" not in parallel or not torch_gomp:
            KERNEL["why_not"] = ("this PyTorch does not run its threads on "
                                 "GNU OpenMP (libgomp)")
            return None, KERNEL["why_not"]
        try:
            lib = _declare(ctypes.CDLL(build()))
        except (HarnessError, OSError) as exc:
            KERNEL["why_not"] = "the fused kernel: %s" % exc
            return None, KERNEL["why_not"]
        more = sorted(_libgomp_paths() - torch_gomp)
        if more:  # PyTorch's copy has another soname: two thread pools
            KERNEL["why_not"] = ("the fused kernel would run on a second "
                                 "OpenMP runtime (%s)" % more[0])
        else:
            KERNEL["lib"] = lib
    return KERNEL["lib"], KERNEL["why_not"]
