"""dlrun storage reader: the read rate of the files under ``--data-dir``.

Standard library only (it needs no PyTorch; it ships with the harness so
that every harness image runs it).  Runs on Python >= 3.6.

- ``--test sequential``: the ``dd``-style read of the largest file, in
  large blocks; bandwidth in GB/s (10^9 bytes/s).  Where ``fio`` is on PATH
  (Debian's package) and ``--reader`` is not ``builtin``, fio reads it
  (``--rw=read``) and its ``--output-format=json`` document is printed
  verbatim before the result line, for dlrun's fio parser.
- ``--test small-files``: every file opened, read whole and closed; files/s.

The page cache: the file is opened with ``O_DIRECT`` where the file system
allows it; else its pages are dropped with ``posix_fadvise(DONTNEED)``
before each timed pass; else (tmpfs, no fadvise) the result says the cache
was warm.  The file system type of the directory comes from
``/proc/self/mountinfo``.  The last line is ``DLRUN_RESULT {json}``.
"""

import errno
import mmap
import os
import shutil
import subprocess
import sys
import time

HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
if HARNESS_DIR not in sys.path:  # run as a script under `python -I`
    sys.path.insert(0, HARNESS_DIR)
from harness_common import (HARNESS_VERSION, ArgumentParser, HarnessError, out, positive,  # noqa: E402
                            print_result, report_failures)

#: Cache handling, in the words the result carries.
DIRECT, DROPPED, WARM = "O_DIRECT", "pages dropped with fadvise", "cache warm: could not drop"
#: File systems whose pages are the data: nothing to drop.
MEMORY_FS = ("tmpfs", "ramfs", "devtmpfs")
MAX_FILES = 1000000
MAX_FIO_BYTES = 4 * 1024 * 1024


def parse_args(argv):
    parser = ArgumentParser(description="dlrun storage reader (sequential GB/s, small files/s)")
    parser.add_argument("--test", choices=("sequential", "small-files"), required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--block-bytes", type=positive, default=8 * 1024 * 1024)
    parser.add_argument("--steps", type=positive, default=3, help="timed passes")
    parser.add_argument("--warmup-steps", type=int, default=0, help="untimed passes first")
    parser.add_argument("--reader", choices=("auto", "builtin", "fio"), default="auto")
    parser.add_argument("--expected-world-size", type=positive, default=1)
    return parser.parse_args(argv)


def unescape_mount(field):
    """mountinfo's octal escapes (``\\040`` for a space)."""
    parts = field.split("\\")
    return parts[0] + "".join(chr(int(p[:3], 8)) + p[3:] if p[:3].isdigit() else "\\" + p for p in parts[1:])


def file_system_type(path, mountinfo="/proc/self/mountinfo"):
    """The type of the file system holding ``path``: the longest mount point above it; "unknown" without
    mountinfo."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open(mountinfo) as handle:
            lines = handle.read(4 * 1024 * 1024).splitlines()
    except (IOError, OSError):
        return kind
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        point = unescape_mount(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, tail.split()[0][:40]
    return kind


def data_files(root):
    """Every non-empty regular file under ``root`` (symbolic links not followed), in name order."""
    found = []
    for top, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(top, name)
            if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) > 0:
                found.append(path)
                if len(found) > MAX_FILES:
                    raise HarnessError("--data-dir %s holds more than %d files; valid: a smaller directory"
                                       % (root, MAX_FILES))
    return found


def open_uncached(path, fs_type, try_direct):
    """(fd, cache handling): O_DIRECT where allowed, else the pages dropped, else warm."""
    if try_direct and hasattr(os, "O_DIRECT") and fs_type not in MEMORY_FS:
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT), DIRECT
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    fd = os.open(path, os.O_RDONLY)
    return fd, drop_pages(fd, fs_type)


def drop_pages(fd, fs_type):
    if fs_type in MEMORY_FS or not hasattr(os, "posix_fadvise"):
        return WARM
    try:
        os.fsync(fd)  # dirty pages are not dropped: write them out first
    except OSError:
        pass  # a read-only mount: nothing of it can be dirty
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        return WARM
    return DROPPED


def read_whole(fd, buf):
    """Bytes read from ``fd`` to its end into the page-aligned ``buf`` (O_DIRECT needs the alignment)."""
    total = 0
    while True:
        got = os.readv(fd, [buf])
        if got <= 0:
            return total
        total += got


def read_pass(paths, fs_type, block, try_direct):
    """(bytes, seconds, cache handling) of one pass over ``paths``: the large file's reads timed (opened with
    O_DIRECT where allowed), or every small file's open, reads and close timed after its pages were dropped."""
    if not try_direct:
        return small_files_pass(paths, fs_type, block)
    buf = mmap.mmap(-1, block)
    handled, total, seconds = set(), 0, 0.0
    try:
        for path in paths:
            fd, how = open_uncached(path, fs_type, try_direct)
            handled.add(how)
            try:
                start = time.perf_counter()
                total += read_whole(fd, buf)
                seconds += time.perf_counter() - start
            finally:
                os.close(fd)
    finally:
        buf.close()
    how = WARM if WARM in handled else (DROPPED if DROPPED in handled else DIRECT)
    return total, seconds, how


def small_files_pass(paths, fs_type, block):
    handled = set()
    for path in paths:  # untimed: each file's pages dropped first
        fd = os.open(path, os.O_RDONLY)
        try:
            handled.add(drop_pages(fd, fs_type))
        finally:
            os.close(fd)
    buf, total = mmap.mmap(-1, block), 0
    try:
        start = time.perf_counter()
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                total += read_whole(fd, buf)
            finally:
                os.close(fd)
        seconds = time.perf_counter() - start
    finally:
        buf.close()
    return total, seconds, WARM if WARM in handled else DROPPED


def builtin_result(args, files, fs_type):
    sequential = args.test == "sequential"
    paths = [max(files, key=os.path.getsize)] if sequential else files
    for _ in range(args.warmup_steps):
        read_pass(paths, fs_type, args.block_bytes, sequential)
    passes = [read_pass(paths, fs_type, args.block_bytes, sequential) for _ in range(args.steps)]
    nbytes, seconds = sum(p[0] for p in passes), sum(p[1] for p in passes)
    if seconds <= 0 or nbytes <= 0:
        raise HarnessError("the timed passes read %d bytes in %.9f s: no rate to report" % (nbytes, seconds))
    cache = WARM if any(p[2] == WARM for p in passes) else passes[0][2]
    record = {"reader": "builtin", "cache": cache, "bytes_read": nbytes, "read_seconds": seconds,
              "files_read": len(paths) * args.steps, "block_bytes": args.block_bytes,
              "pass_gbs": [p[0] / p[1] / 1e9 for p in passes if p[1] > 0]}
    if sequential:
        record.update(metric="read_bandwidth", value=nbytes / seconds / 1e9, unit="GB/s",
                      file=os.path.relpath(paths[0], args.data_dir), file_bytes=os.path.getsize(paths[0]),
                      value_is="sequential read bandwidth of the largest file: bytes read / read seconds / 1e9, "
                               "over %d timed pass(es)" % args.steps)
    else:
        record.update(metric="file_read_rate", value=len(paths) * args.steps / seconds, unit="files/s",
                      read_gbs=nbytes / seconds / 1e9,
                      value_is="files opened, read whole and closed per second, over %d timed pass(es) of %d "
                               "file(s)" % (args.steps, len(paths)))
    return record


def fio_result(args, files, fs_type, fio):
    """fio's read of the largest file: direct where the file system allows it, else buffered with fio's
    `invalidate` (its own fadvise of the file's pages); its JSON printed for dlrun's fio parser."""
    path = max(files, key=os.path.getsize)
    size = os.path.getsize(path)
    block = args.block_bytes
    while block > 4096 and block > size:  # fio reads whole blocks of the file
        block //= 2
    if block > size:
        raise HarnessError("the largest file under --data-dir %s has %d bytes, less than one %d-byte block; "
                           "valid: a larger file, or --reader builtin" % (args.data_dir, size, block))
    base = [fio, "--name=seqread", "--filename=" + path, "--rw=read", "--bs=%d" % block,
            "--size=%d" % (size // block * block), "--ioengine=psync", "--readonly", "--loops=%d" % args.steps,
            "--output-format=json"]
    # a memory file system's pages are its data (even where it takes O_DIRECT): nothing to bypass or drop
    memory = fs_type in MEMORY_FS
    tries = ([] if memory else [(["--direct=1"], DIRECT)]) + [(["--direct=0", "--invalidate=1"],
                                                               WARM if memory else DROPPED)]
    for flags, cache in tries:
        proc = subprocess.Popen(base + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = proc.communicate()
        if proc.returncode == 0:
            out(stdout[:MAX_FIO_BYTES].decode("utf-8", "replace").rstrip("\n"))
            return {"reader": "fio", "cache": cache, "metric": "read_bandwidth", "unit": "GB/s", "block_bytes": block,
                    "file": os.path.relpath(path, args.data_dir), "file_bytes": os.path.getsize(path),
                    "value_is": "fio's read bandwidth of the largest file (bw_bytes / 1e9)"}
    raise HarnessError("fio failed on %s: %s" % (path, stderr.decode("utf-8", "replace").strip()[-300:]))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def body():
        if not os.path.isdir(args.data_dir):
            raise HarnessError("--data-dir %s is not a directory; valid: the directory to read" % args.data_dir)
        files = data_files(args.data_dir)
        if not files:
            raise HarnessError("--data-dir %s holds no data files to read; valid: a directory with files "
                               "(dlrun data synth OUT --format storage writes one)" % args.data_dir)
        fs_type = file_system_type(args.data_dir)
        fio = shutil.which("fio") if args.reader != "builtin" and args.test == "sequential" else None
        if args.reader == "fio" and fio is None:
            raise HarnessError("--reader fio: no fio on PATH; valid: --reader builtin or auto")
        record = fio_result(args, files, fs_type, fio) if fio else builtin_result(args, files, fs_type)
        record.update(benchmark="storage", test=args.test, fs_type=fs_type, files_found=len(files),
                      world_size=1, num_devices=args.expected_world_size, batch_size_per_rank=None,
                      python=sys.version.split()[0], harness_version=HARNESS_VERSION)
        print_result(record)
        return 0

    return report_failures(body)


if __name__ == "__main__":
    sys.exit(main())
