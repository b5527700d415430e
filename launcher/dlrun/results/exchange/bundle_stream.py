"""The bytes of a bundle as a bounded stream: gzip inflated on demand, and every tar header checked as it
passes, before Python's tarfile reads what the header announces.

tarfile reads a PAX or GNU long-name header's whole content into memory, as one `read(size)`; a bundle
whose first header announces a gigabyte would take that much before any check of ours. `TarGuard` sits
between the inflater and tarfile, parses each 512-byte header on its way through, and refuses (one line,
BundleError) a header type a bundle never holds, a PAX/GNU header larger than `tar_header_bytes`, a member
larger than any member may be, more members than `bundle_members`, more than `padding_bytes` after the
end-of-archive block, and anything but zeros there. `Inflated` refuses more than `bundle_bytes` in all
and anything after the end of the gzip stream.
"""
from __future__ import annotations

import hashlib
import zlib

from dlrun.results.exchange.bundle import BundleError
from dlrun.results.limits import Limits, size_text

CHUNK = 1 << 20
BLOCK = 512
#: Header types a bundle may hold: regular files ('0', NUL, contiguous '7'), a PAX header for the next
#: member ('x'), GNU long names ('L', 'K'); links, devices, directories and FIFOs ('1'-'6') pass here and are
#: refused by name by the reader.
_REGULAR = frozenset(b"0\x007")
_EXTENDED = frozenset(b"xLK")
_NO_DATA = frozenset(b"123456")
#: At most this many PAX/GNU headers before one member (tarfile follows such a chain recursively).
MAX_HEADER_CHAIN = 4


class Inflated:
    """The gunzipped bytes of a file, read on demand; refuses more than `limit` bytes, damage, and anything
    after the end of the gzip stream. `raw_sha256` hashes the file's bytes as they are read."""

    def __init__(self, handle, limit: int, label: str):
        self._handle, self._limit, self._label = handle, limit, label
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buffer = bytearray()  # deleting from its front is cheap: tarfile reads it 10 KiB at a time
        self._total = 0
        self._done = False
        self.raw_sha256 = hashlib.sha256()

    def _raw(self, size: int) -> bytes:
        data = self._handle.read(size)
        self.raw_sha256.update(data)
        return data

    def _fill(self, want: int) -> None:
        while len(self._buffer) < want and not self._done:
            if self._inflate.eof:
                if self._inflate.unused_data or self._raw(1):
                    raise BundleError(f"{self._label}: data after the end of the compressed archive")
                self._done = True
                break
            source = self._inflate.unconsumed_tail or self._raw(CHUNK)
            if not source:
                raise BundleError(f"{self._label}: the archive is truncated")
            try:
                data = self._inflate.decompress(source, CHUNK)
            except zlib.error as exc:
                raise BundleError(f"{self._label}: not a gzip-compressed bundle, or damaged ({exc})") from None
            self._total += len(data)
            if self._total > self._limit:
                raise BundleError(f"{self._label}: more than {size_text(self._limit)} uncompressed "
                                  "(limits.bundle_bytes); refused")
            self._buffer += data

    def read(self, size: int) -> bytes:
        self._fill(size)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def _number(field: bytes) -> int | None:
    """A tar header's numeric field: octal digits, or GNU's base-256 (first byte 0x80 or 0xff)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return -((1 << (8 * len(field) - 8)) - value) if field[:1] == b"\xff" else value
    digits = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(digits or b"0", 8)
    except ValueError:
        return None


def _pax_size(records: bytes) -> int | None:
    """The `size` record of a PAX header's content (`LEN key=value\\n` records), if it has one."""
    size = None
    at = 0
    while at < len(records):
        length_text, space, _ = records[at:at + 24].partition(b" ")
        if not space or not length_text.isdigit() or int(length_text) <= len(length_text):
            return size  # malformed: tarfile refuses it
        record = records[at:at + int(length_text)]
        key, _, value = record[len(length_text) + 1:].rstrip(b"\n").partition(b"=")
        if key == b"size" and value.isdigit():
            size = int(value)
        elif key.startswith(b"GNU.sparse"):
            size = -1  # a sparse file: refused below
        at += int(length_text)
    return size


class TarGuard:
    """A tar stream passed through unchanged, with every header checked on its way (see the module notes).
    `member_limit` is the largest member any name may have (the reader checks each name's own limit)."""

    def __init__(self, stream: Inflated, limits: Limits, member_limit: int, label: str):
        self._stream, self._limits, self._member_limit, self._label = stream, limits, member_limit, label
        self._offset = 0            # of the next byte read
        self._next_header = 0       # offset where the next header block starts
        self._header = bytearray()  # a header block arriving in pieces
        self._pax: bytearray | None = None  # content of the PAX header being passed
        self._pax_size: int | None = None   # its `size`, for the member after it
        self._chain = 0
        self._members = 0
        self._ended = False
        self._padding = 0

    def read(self, size: int) -> bytes:
        data = self._stream.read(size)
        self._check(data)
        self._offset += len(data)
        return data

    def _check(self, data: bytes) -> None:
        at = 0
        while at < len(data):
            if self._ended:
                self._after_end(data[at:])
                return
            position = self._offset + at
            if position < self._next_header:  # inside a member's data (and its padding to 512 bytes)
                step = min(len(data) - at, self._next_header - position)
                if self._pax is not None:
                    self._pax += data[at:at + step]
                at += step
                continue
            step = min(BLOCK - len(self._header), len(data) - at)
            self._header += data[at:at + step]
            at += step
            if len(self._header) == BLOCK:
                self._on_header(bytes(self._header), self._offset + at)
                self._header.clear()

    def _after_end(self, data: bytes) -> None:
        if data.strip(b"\0"):
            raise BundleError(f"{self._label}: data after the end of the archive")
        self._padding += len(data)
        if self._padding > self._limits.padding_bytes:
            raise BundleError(f"{self._label}: more than {size_text(self._limits.padding_bytes)} of padding after the "
                              "end of the archive (limits.padding_bytes); refused")

    def _refuse(self, what: str) -> None:
        raise BundleError(f"{self._label}: {what}; refused")

    def _on_header(self, block: bytes, end: int) -> None:
        if self._pax is not None:
            self._pax_size, self._pax = _pax_size(bytes(self._pax)), None
        if block.count(0) == BLOCK:  # the end-of-archive block: tarfile stops here
            self._ended = True
            self._padding = BLOCK
            return
        kind, size = block[156], _number(block[124:136])
        if size is None or size < 0:
            self._refuse("a tar header with a damaged size field")
        if kind in _EXTENDED:
            self._chain += 1
            if self._chain > MAX_HEADER_CHAIN:
                self._refuse(f"more than {MAX_HEADER_CHAIN} PAX/GNU headers before one member")
            if size > self._limits.tar_header_bytes:
                self._refuse(f"a tar header (type {chr(kind)!r}) of {size:,} bytes, more than "
                             f"{size_text(self._limits.tar_header_bytes)} (limits.tar_header_bytes)")
            self._pax = bytearray() if kind == ord("x") else None
            self._next_header = end + -(-size // BLOCK) * BLOCK
            return
        if self._pax_size is not None:
            size, self._pax_size = self._pax_size, None
            if size < 0:
                self._refuse("a sparse file member")
        self._chain = 0
        self._members += 1
        if self._members > self._limits.bundle_members:
            self._refuse(f"more than {self._limits.bundle_members:,} members (limits.bundle_members)")
        if kind in _NO_DATA:
            self._next_header = end
        elif kind in _REGULAR:
            if size > self._member_limit:
                self._refuse(f"a member of {size:,} bytes, more than any member may have "
                             f"({size_text(self._member_limit)})")
            self._next_header = end + -(-size // BLOCK) * BLOCK
        else:
            self._refuse(f"a tar member of type {chr(kind)!r}, which a bundle never holds")
