"""TFRecord files and tf.train.Example records, written without TensorFlow.

A TFRecord file is a sequence of records, each framed as
`uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)` (little endian), where
masked(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2^32 and crc32c is CRC-32C (Castagnoli, reflected
polynomial 0x82F63B78). The data of an ImageNet record is a serialized tf.train.Example protobuf: a
`Features` message (field 1) holding a map<string, Feature> (field 1, entries of key = 1, value = 2), a
Feature being one of BytesList (1), FloatList (2) or Int64List (3), each a repeated field 1.

Why by hand: the encoding is about forty lines, and both the dependency-free reader (the in-container
harness, which must run without TensorFlow or protobuf) and this writer can then be tested against the
format's published check values rather than against one library's view of it. The checksums come from the
`crc32c` package (the `data` extra, which `dlrun data synth` needs for Pillow anyway): a C implementation,
independent of the harness's pure-Python table, and both are checked against the same published values.
"""
from __future__ import annotations

import struct
from typing import BinaryIO

from crc32c import crc32c

MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def write_record(handle: BinaryIO, data: bytes) -> None:
    header = struct.pack("<Q", len(data))
    handle.write(header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data)))


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf encodes it: two's complement, 10 bytes when negative
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature(value: bytes | int | float) -> bytes:
    if isinstance(value, bytes):
        return _field(1, _field(1, value))  # BytesList
    if isinstance(value, int):
        return _field(3, _field(1, _varint(value)))  # Int64List, packed
    return _field(2, _field(1, struct.pack("<f", value)))  # FloatList, packed


def example(features: dict[str, bytes | int | float]) -> bytes:
    """A serialized tf.train.Example with one value per feature (keys sorted, as TensorFlow writes them)."""
    entries = b"".join(_field(1, _field(1, key.encode()) + _field(2, _feature(value)))
                       for key, value in sorted(features.items()))
    return _field(1, entries)
