"""dlrun PyTorch harness: TFRecord files and tf.train.Example records, read
without TensorFlow or protobuf.  Standard library only; runs on Python >= 3.6.

Framing of one record (little endian): ``uint64 length``, ``uint32
masked_crc32c(length bytes)``, ``length`` data bytes, ``uint32
masked_crc32c(data)``; masked(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod
2^32, crc32c = CRC-32C (Castagnoli).  Both checksums are verified: a record
whose length or data does not match its checksum, or a file that ends inside
a record, is an error naming the file and the record's byte offset.

The data of an ImageNet record is a serialized tf.train.Example: Features
(field 1) -> map<string, Feature> (field 1; entry key 1, value 2) -> Feature
= BytesList (1) | FloatList (2) | Int64List (3), each a repeated field 1
(numbers packed or not).  CRC-32C comes from the ``crc32c`` package where it
is installed (C speed), else from the table-driven loop here.
"""

import struct

CRC32C_POLY = 0x82F63B78
MASK_DELTA = 0xA282EAD8


class TFRecordError(Exception):
    """A file that is not valid TFRecord data (message names file, offset)."""


def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _crc32c_python(data):
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytearray(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # optional: the C implementation, where the image has it
    from crc32c import crc32c as _crc32c_fast  # type: ignore
except Exception:  # ImportError, or a broken build
    _crc32c_fast = None

crc32c = _crc32c_fast or _crc32c_python


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def index_records(path):
    """[(data offset, length)] of every record in the file at ``path``,
    checking each length's checksum and that the file holds every record
    whole (the data checksums are checked when a record is read)."""
    records = []
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(0)
        offset = 0
        while offset < size:
            header = handle.read(12)
            if len(header) < 12:
                raise TFRecordError("%s: truncated record header at byte %d"
                                    % (path, offset))
            length_bytes = header[:8]
            (length,) = struct.unpack("<Q", length_bytes)
            (crc,) = struct.unpack("<I", header[8:])
            if crc != masked_crc(length_bytes):
                raise TFRecordError("%s: record at byte %d: length checksum "
                                    "mismatch (not TFRecord data, or "
                                    "corrupted)" % (path, offset))
            end = offset + 12 + length + 4
            if end > size:
                raise TFRecordError("%s: record at byte %d: %d data bytes "
                                    "announced, the file ends first"
                                    % (path, offset, length))
            records.append((offset + 12, length))
            offset = end
            handle.seek(offset)
    return records


def read_record(handle, path, offset, length):
    """The data of the record at ``offset`` (as index_records gives it) of
    the open file ``handle``, its checksum verified."""
    handle.seek(offset)
    blob = handle.read(length + 4)
    if len(blob) != length + 4:
        raise TFRecordError("%s: record at byte %d: truncated"
                            % (path, offset - 12))
    data = blob[:length]
    (crc,) = struct.unpack("<I", blob[length:])
    if crc != masked_crc(data):
        raise TFRecordError("%s: record at byte %d: data checksum mismatch "
                            "(corrupted)" % (path, offset - 12))
    return data


def _varint(buf, pos):
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf):
    """(field number, wire type, value) of a protobuf message: value is an
    int for varints, bytes for length-delimited fields, raw bytes for the
    fixed-size ones."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value = buf[pos:pos + length]
            if len(value) != length:
                raise ValueError("truncated field %d" % number)
            pos += length
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield number, wire, value


def _signed64(value):
    return value - (1 << 64) if value >= (1 << 63) else value


def _feature_values(buf):
    values = []
    for kind, _, payload in _fields(buf):
        for number, wire, value in _fields(payload):
            if number != 1:
                continue
            if kind == 1:  # BytesList
                values.append(bytes(value))
            elif kind == 3:  # Int64List: packed (wire 2) or not (wire 0)
                if wire == 0:
                    values.append(_signed64(value))
                else:
                    pos = 0
                    while pos < len(value):
                        item, pos = _varint(value, pos)
                        values.append(_signed64(item))
            elif kind == 2:  # FloatList: packed (wire 2) or not (wire 5)
                count = len(value) // 4
                values.extend(struct.unpack("<%df" % count, value[:4 * count]))
    return values


def parse_example(data):
    """{feature name: [values]} of a serialized tf.train.Example (bytes,
    ints or floats per feature).  ValueError if it is not one."""
    data = memoryview(data).tobytes() if not isinstance(data, bytes) else data
    features = {}
    for number, wire, payload in _fields(data):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(payload):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, value = None, b""
            for n, w, v in _fields(entry):
                if n == 1 and w == 2:
                    key = bytes(v).decode("utf-8")
                elif n == 2 and w == 2:
                    value = v
            if key is not None:
                features[key] = _feature_values(value)
    return features
