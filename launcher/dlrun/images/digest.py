"""Content digests that do not depend on the tool that produced the bytes.

`tree_digest` identifies an unpacked root filesystem (what Charliecloud runs): sha256 over one line per
entry, `<type> <mode octal> <sha256 | link target | -> <path>\\n`, type f/l/d/o (regular file, symlink,
directory, other), walking each directory's entries in name order before descending into its
subdirectories (symlinks are not followed). Owners and times are left out: an unprivileged unpack owns every file
itself and stamps its own times, and the result must still verify against the builder's digest.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path


def file_sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()


def bytes_sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree_digest(root: Path) -> str:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    what = "f", hashlib.file_digest(handle, "sha256").hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                what = "l", os.readlink(full)
            elif stat.S_ISDIR(st.st_mode):
                what = "d", "-"
            else:
                what = "o", "-"
            line = f"{what[0]} {mode:o} {what[1]} {rel}\n"
            digest.update(line.encode("utf-8", "surrogateescape"))
    return "sha256:" + digest.hexdigest()
