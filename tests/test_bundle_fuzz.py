"""Fuzzing the bundle reader: whatever the file holds, reading it gives a verified bundle or BundleError, and
nothing is ever written outside the staging directory.

Inputs: random bytes (raw, and gzip-compressed so they reach the tar reader), a real bundle truncated at
random points or with random bytes changed, tar archives of random members (names with `..`, absolute
paths, links, devices, directories) behind a manifest that lists them, runs.jsonl lines of random JSON
behind a manifest whose hashes match, and a real run record with hostile times, counts and figures. Derandomised, so CI sees the same inputs every time.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from bundle_data import filled_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrun.results.exchange.bundle import BundleError
from dlrun.results.exchange.bundle_read import read_bundle
from dlrun.results.exchange.export import export_bundle
from dlrun.results.store.fields import check_fields, stamp_seconds
from dlrun.results.store.query import Filters


def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=True, deadline=None, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("fuzz")
    out = root / "good.bundle"
    export_bundle(filled_store(root / "a"), Filters(), out, site="site-a", dlrun_version="0.1.0", with_logs=True)
    return out.read_bytes()


def _read(tmp_path: Path, data: bytes):
    """Read `data` as a bundle into a fresh staging directory; check the contract; the bundle or None."""
    path = tmp_path / "in.bundle"
    path.write_bytes(data)
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    before = {p for p in tmp_path.rglob("*") if not p.is_relative_to(staging)}
    try:
        bundle = read_bundle(path, staging=staging)
        bundle.spooled = bundle.runs_path.read_bytes()  # what the import would store, before staging is emptied
    except BundleError as exc:
        assert str(exc) and "\n" not in str(exc)
        bundle = None
    assert {p for p in tmp_path.rglob("*") if not p.is_relative_to(staging)} == before
    for placed in staging.rglob("*"):
        assert not placed.is_symlink() and placed.resolve().is_relative_to(staging.resolve())
    for child in list(staging.rglob("*"))[::-1]:
        child.unlink() if child.is_file() else child.rmdir()
    return bundle


@fuzz(150)
@given(data=st.binary(max_size=4096), packed=st.booleans())
def test_random_bytes(tmp_path, data, packed):
    assert _read(tmp_path, gzip.compress(data, mtime=0) if packed else data) is None


@fuzz(150)
@given(cut=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_truncated_bundles(tmp_path, good, cut):
    assert _read(tmp_path, good[:int(len(good) * cut)]) is None


@fuzz(150)
@given(changes=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.integers(1, 255)),
                        min_size=1, max_size=4))
def test_changed_bytes(tmp_path, good, changes):
    data = bytearray(good)
    for where, xor in changes:
        data[int(len(data) * where)] ^= xor
    bundle = _read(tmp_path, bytes(data))
    if bundle is not None:  # only the gzip header's time and OS bytes can change without changing the content
        reference = _read(tmp_path, good)
        assert (bundle.manifest_bytes, bundle.spooled, bundle.runs, bundle.logs) == \
            (reference.manifest_bytes, reference.spooled, reference.runs, reference.logs)


NAMES = st.one_of(st.sampled_from(["runs.jsonl", "logs/r1/output.log", "logs/r1/../../x", "/etc/passwd",
                                   "logs/r1/a/b", "logs/r1/a", "logs/../r1/x", "logs/r1/.", "manifest.json",
                                   "logs/r1/" + "d/" * 20 + "f", "logs/r1/x\x00y", "logs//x"]),
                  st.text(min_size=1, max_size=30))
TYPES = st.sampled_from([tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.CHRTYPE,
                         tarfile.FIFOTYPE])


@fuzz(200)
@given(entries=st.lists(st.tuples(NAMES, TYPES, st.binary(max_size=64)), max_size=6), listed=st.booleans())
def test_random_members_behind_a_manifest(tmp_path, entries, listed):
    files = {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)} for name, _, data in entries} \
        if listed else {}
    files.setdefault("runs.jsonl", {"sha256": hashlib.sha256(b"").hexdigest(), "size": 0})
    manifest = {"format": "dlrun-results-bundle", "format_version": 1, "site": "s", "dlrun_version": "0",
                "created_at": None, "filters": {}, "runs": 0, "with_logs": True, "files": files}
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, kind, data in [("manifest.json", tarfile.REGTYPE, json.dumps(manifest).encode()), *entries]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            try:
                tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            except ValueError:  # a name tarfile itself cannot write (NUL)
                return
    _read(tmp_path, raw.getvalue())


@fuzz(200)
@given(lines=st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                                   lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                                       st.sampled_from(["id", "status", "plan", "provenance", "results", "created_at",
                                                        "metric", "value", "unit", "site", "origin", "x"]),
                                       inner, max_size=6), max_leaves=20), max_size=3))
def test_random_run_records_with_matching_hashes(tmp_path, lines):
    runs = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    manifest = {"format": "dlrun-results-bundle", "format_version": 1, "site": "s", "dlrun_version": "0",
                "created_at": None, "filters": {}, "runs": len(lines), "with_logs": False,
                "files": {"runs.jsonl": {"sha256": hashlib.sha256(runs).hexdigest(), "size": len(runs)}}}
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), ("runs.jsonl", runs)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    _read(tmp_path, raw.getvalue())


def _pax(records: list[tuple[str, str]]) -> bytes:
    out = b""
    for key, value in records:
        body = f" {key}={value}\n".encode()
        length = len(body) + len(str(len(body)))
        length += len(str(length)) - len(str(len(body)))
        out += str(length).encode() + body
    return out


KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.XHDTYPE, tarfile.XGLTYPE,
                         tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE, tarfile.SYMTYPE,
                         tarfile.DIRTYPE, tarfile.FIFOTYPE, b"V", b"M", b"Z"])
HEADERS = st.lists(st.tuples(
    st.sampled_from(["manifest.json", "manifest.json.sig", "runs.jsonl", "logs/r1/output.log", "././@PaxHeader"]),
    KINDS, st.one_of(st.integers(0, 4096), st.integers(0, 1 << 40)),
    st.one_of(st.binary(max_size=700), st.lists(st.tuples(st.sampled_from(["size", "path", "GNU.sparse.map", "x"]),
                                                            st.one_of(st.integers(0, 1 << 40).map(str),
                                                                      st.text(max_size=20))),
                                                  max_size=3).map(_pax))),
    min_size=1, max_size=6)


@fuzz(200)
@given(headers=HEADERS, tail=st.integers(0, 3000))
def test_hostile_tar_headers(tmp_path, headers, tail):
    """Headers of every type tarfile knows (and some it does not), announcing anything up to a terabyte, with
    PAX records that resize the next member or make it sparse: a verified bundle or one line, never more."""
    raw = b""
    for name, kind, size, data in headers:
        info = tarfile.TarInfo(name)
        info.type, info.size = kind, size
        raw += info.tobuf(format=tarfile.GNU_FORMAT) + data + bytes(-len(data) % 512)
    _read(tmp_path, gzip.compress(raw + bytes(tail), mtime=0))


def _bundle_of(lines: list[bytes]) -> bytes:
    runs = b"".join(line + b"\n" for line in lines)
    manifest = {"format": "dlrun-results-bundle", "format_version": 2, "site": "s", "dlrun_version": "0",
                "created_at": None, "filters": {}, "runs": len(lines), "with_logs": False,
                "files": {"runs.jsonl": {"sha256": hashlib.sha256(runs).hexdigest(), "size": len(runs)}}}
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in (("manifest.json", json.dumps(manifest).encode()), ("runs.jsonl", runs)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


STAMPS = st.one_of(
    st.sampled_from(["not-a-date", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "9999-12-31T23:59:59Z", "",
                     "2026-01-01T00:00:00+00:00", "2026-01-01 00:00:00", "2026-01-01T00:00:00Z", " 2026-01-01T00:00:00Z",
                     "2026-01-01T00:00:00Z\n", "２０２６-01-01T00:00:00Z"]),
    st.datetimes().map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%SZ")),
    st.text(max_size=24))
VALUES = st.one_of(st.sampled_from([-0.0, 0.0, 0, -1.0, 5e-324, 1.0, 1e308]), st.floats(allow_nan=False))


@fuzz(300)
@given(created=STAMPS, finished=st.none() | STAMPS, value=VALUES, status=st.sampled_from(["ok", "failed", "lost"]),
       nodes=st.none() | st.integers(-2, 2**32))
def test_hostile_times_counts_and_values_of_a_real_record(tmp_path, good, created, finished, value, status, nodes):
    """A real exported run with its times, node count, status and figure replaced: the bundle is read only
    when the store's own check of every field (dlrun.results.store.fields) passes; so no time that is not one,
    no impossible count and no zero figure of an ok run is ever stored, whatever a bundle says."""
    with tarfile.open(fileobj=io.BytesIO(good), mode="r:gz") as tar:
        record = json.loads(tar.extractfile("runs.jsonl").read().splitlines()[0])
    record.update(created_at=created, finished_at=finished, status=status, nodes=nodes)
    record["results"] = [{**record["results"][0], "value": value}] if record["results"] else []
    try:
        check_fields(record, record["results"])
        valid = True
    except ValueError:
        valid = False
    bundle = _read(tmp_path, _bundle_of([json.dumps(record).encode()]))
    assert (bundle is not None) == valid, (created, finished, value, status, nodes)
    if bundle is not None:
        stored = json.loads(bundle.spooled)
        assert stamp_seconds(stored["created_at"]) >= 0 and (status != "ok" or not stored["results"]
                                                             or stored["results"][0]["value"] > 0)
