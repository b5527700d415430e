"""Keyed fingerprints of a run's secret forms: how what the ranks printed is redacted after the dlrun that knew
the values died (SIGKILL, a crash, a reboot), without the values ever being written.

Before its job starts, a run directory gets `.secret-prints.json`: for every form of every secret value
(`dlrun.secrets.forms.needles`), its length, the top PRINT_BITS bits of a rolling polynomial hash (whose base is
secret) of its first ANCHOR_BYTES bytes and of all of it, and an HMAC-SHA256 of it, all under a key derived from the
site's key (`secrets.key` in DLRUN_HOME, 0600, made once) and a salt of the run's own. The recovery of an orphaned
run, and every export of a run's files (`--with-logs`), slide a window over the files, keep the places where a
form's first bytes have its rolling hash, and redact the forms whose HMAC matches there too. The file is useless
without the site's key, and neither travels in a bundle.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections import defaultdict
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.files import write_json
from dlrun.paths import STAGING_PREFIX
from dlrun.secrets.forms import needles
from dlrun.secrets.redact import Redactor

PRINTS_NAME = ".secret-prints.json"
KEY_NAME = "secrets.key"
KEY_BYTES = 32
#: Bits kept of the rolling hash of each form's first ANCHOR_BYTES bytes, to pick the windows worth an HMAC
#: (in a 1 MiB chunk, about one window per form by chance).
PRINT_BITS = 20
ANCHOR_BYTES = 8
_MASK = (1 << 64) - 1
_FORMAT = 1


class PrintsUnusable(DlrunError):
    """A run's fingerprints cannot be checked: the site's key is gone or is not the one they were made with."""

    exit_code = 2


def key_path(runs_root: Path) -> Path:
    """Where the site's key lives: beside the run directories' folder (DLRUN_HOME), never in a run directory."""
    return Path(runs_root).parent / KEY_NAME


def site_key(path: Path, create: bool = False) -> bytes | None:
    """The site's key (made, 0600, when `create` and there is none); None when there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{KEY_NAME}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # whole or not at all, and never over another dlrun's key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        data = path.read_bytes()
    return data if len(data) == KEY_BYTES else None


def _key_id(key: bytes) -> str:
    return hmac.new(key, b"dlrun secrets key id", hashlib.sha256).hexdigest()[:16]


def _derived(key: bytes, salt: bytes) -> tuple[bytes, int]:
    run_key = hmac.new(key, b"dlrun secret prints\0" + salt, hashlib.sha256).digest()
    base = int.from_bytes(hmac.new(run_key, b"rolling base", hashlib.sha256).digest()[:8], "little") | 1
    return run_key, base


def _rolling(data: bytes, base: int) -> int:
    value = 0
    for byte in data:
        value = (value * base + byte) & _MASK
    return value


def _top(data: bytes, base: int) -> int:
    return _rolling(data, base) >> (64 - PRINT_BITS)


def _mac(run_key: bytes, data: bytes) -> str:
    return hmac.new(run_key, data, hashlib.sha256).hexdigest()[:32]


def fingerprints(values: list[str], key: bytes) -> dict | None:
    """The fingerprint file's content for `values` under the site's `key`; None when there is nothing to look
    for (no secret, or only ones too short)."""
    forms = [form.encode("utf-8", "surrogateescape") for form in needles(values)]
    if not forms:
        return None
    salt = secrets.token_bytes(16)
    run_key, base = _derived(key, salt)
    entries = sorted({(len(form), min(len(form), ANCHOR_BYTES), _top(form[:ANCHOR_BYTES], base), _top(form, base),
                       _mac(run_key, form)) for form in forms})
    return {"format": _FORMAT, "key_id": _key_id(key), "salt": salt.hex(),
            "forms": [{"length": n, "anchor": a, "start": f, "whole": w, "mac": m} for n, a, f, w, m in entries]}


def write_prints(run_path: Path, values: list[str], key_file: Path) -> bool:
    """Write the fingerprints of `values`' forms into the run directory; False when there is nothing to look
    for."""
    if not needles(values):
        return False
    key = site_key(key_file, create=True)
    if key is None:
        raise PrintsUnusable(f"{key_file} is not a key dlrun made ({KEY_BYTES} bytes); remove it and run again")
    write_json(run_path / PRINTS_NAME, fingerprints(values, key))
    return True


class _Windows:
    """Rolling hashes of the windows of `data` (polynomial, base `base`, mod 2**64), any length, any places."""

    def __init__(self, data: bytes, base: int):
        import numpy as np  # scipy's own dependency

        n = len(data)
        self.np = np
        powers = np.full(n, base, dtype=np.uint64)
        powers[0] = 1
        self.powers = np.cumprod(powers, dtype=np.uint64)  # base**i mod 2**64
        inverse = np.full(n, pow(base, -1, 1 << 64), dtype=np.uint64)
        inverse[0] = 1
        inverse = np.cumprod(inverse, dtype=np.uint64)
        self.prefix = np.zeros(n + 1, dtype=np.uint64)  # sum of data[i] * base**-i below each place
        np.cumsum(np.frombuffer(data, dtype=np.uint8).astype(np.uint64) * inverse, dtype=np.uint64,
                  out=self.prefix[1:])

    def top(self, length: int, starts=None):
        """PRINT_BITS top bits of the hashes of the windows of `length` at `starts` (all of them: None)."""
        if starts is None:
            windows = len(self.prefix) - length
            rolled = (self.prefix[length:] - self.prefix[:windows]) * self.powers[length - 1:]
        else:
            rolled = (self.prefix[starts + length] - self.prefix[starts]) * self.powers[starts + length - 1]
        return rolled >> self.np.uint64(64 - PRINT_BITS)


class Prints:
    """A matcher (dlrun.secrets.redact.Matcher) of fingerprinted forms: the places where a form's first bytes
    (its anchor) have its rolling hash are candidates, a candidate whose window of the form's length has its
    rolling hash too is checked, and one whose HMAC matches is the form."""

    def __init__(self, run_key: bytes, base: int, entries: list[dict]):
        self.run_key, self.base = run_key, base
        self.starts: dict[int, set[int]] = defaultdict(set)  # anchor length -> its hashes
        self.wholes: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))  # length -> hash -> macs
        for entry in entries:
            self.starts[int(entry["anchor"])].add(int(entry["start"]))
            self.wholes[int(entry["length"])][int(entry["whole"])].add(str(entry["mac"]))
        self.longest = max(self.wholes, default=0)

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        n = len(data)
        if n < min(self.starts, default=n + 1):
            return []
        windows = _Windows(data, self.base)
        np = windows.np
        places = np.zeros(n, dtype=bool)
        for anchor, hashes in self.starts.items():
            if anchor <= n:
                wanted = np.zeros(1 << PRINT_BITS, dtype=bool)
                wanted[sorted(hashes)] = True
                places[:n - anchor + 1] |= wanted[windows.top(anchor)]
        candidates = np.flatnonzero(places)
        found = []
        for length, by_hash in self.wholes.items():
            starts = candidates[candidates <= n - length]
            if not len(starts):
                continue
            wanted = np.zeros(1 << PRINT_BITS, dtype=bool)
            wanted[sorted(by_hash)] = True
            tops = windows.top(length, starts)
            for start, top in zip(starts[wanted[tops]].tolist(), tops[wanted[tops]].tolist()):
                if _mac(self.run_key, data[start:start + length]) in by_hash[top]:
                    found.append((start, start + length))
        return found


def prints_redactor(data: dict, key: bytes) -> Redactor:
    """The redactor of fingerprints (`fingerprints`' content) made under `key`."""
    run_key, base = _derived(key, bytes.fromhex(str(data.get("salt", ""))))
    return Redactor(Prints(run_key, base, list(data.get("forms") or [])))


def load_prints(run_path: Path, key_file: Path) -> Redactor | None:
    """The redactor of a run directory's fingerprints; None when it has none (no secret, or a run made before
    dlrun kept them); PrintsUnusable when the site's key is gone or changed."""
    try:
        data = json.loads((Path(run_path) / PRINTS_NAME).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PrintsUnusable(f"cannot read {Path(run_path) / PRINTS_NAME}: {exc}") from None
    key = site_key(key_file)
    if key is None or not isinstance(data, dict) or data.get("key_id") != _key_id(key):
        raise PrintsUnusable(f"the secrets of run {Path(run_path).name.removeprefix(STAGING_PREFIX)} cannot be "
                             f"checked: the key they were fingerprinted with ({key_file}) is gone or changed")
    return prints_redactor(data, key)
