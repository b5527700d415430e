"""`ompi_info --parsable` (about 0.3 s, most of a run's node inventory) is kept between processes, per binary and
per folder of its components: a real executable on PATH stands for Open MPI's and counts how often it runs."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dlrun.probe.mpi import OMPI_INFO_CACHE, ompi_info_text

FAKE = """#!/bin/sh
echo run >> "{count}"
if [ "$3" = pkglibdir ]; then echo "path:pkglibdir:{lib}"; exit 0; fi
echo "path:prefix:/usr"
for f in "{lib}"/mca_pmix_*.so; do n=${{f##*/mca_pmix_}}; echo "mca:pmix:${{n%.so}}:version:\\"component:{version}\\""; done
"""


@pytest.fixture
def fake_ompi(tmp_path, monkeypatch):
    lib, bin_dir = tmp_path / "lib" / "openmpi", tmp_path / "bin"
    lib.mkdir(parents=True)
    bin_dir.mkdir()
    (lib / "mca_pmix_ext3x.so").write_bytes(b"")
    count = tmp_path / "count"

    def install(version: str) -> None:
        binary = bin_dir / "ompi_info"
        binary.write_text(FAKE.format(count=count, lib=lib, version=version))
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)

    install("4.1.4")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DLRUN_CACHE_DIR", str(tmp_path / "cache"))
    runs = lambda: len(count.read_text().splitlines()) if count.exists() else 0  # noqa: E731
    return lib, install, runs, tmp_path / "cache" / OMPI_INFO_CACHE


def test_the_second_process_reads_ompi_info_from_the_cache(fake_ompi):
    _, _, runs, _ = fake_ompi
    first = ompi_info_text()
    assert "mca:pmix:ext3x:version" in first and runs() == 2  # its output and its components' folder
    assert ompi_info_text() == first and runs() == 2


def test_a_component_installed_or_a_new_binary_is_read_again(fake_ompi):
    lib, install, runs, _ = fake_ompi
    ompi_info_text()
    (lib / "mca_pmix_pmix4.so").write_bytes(b"")
    later = lib.stat().st_mtime_ns + 1_000_000_000  # installed a second later than the cache was written
    os.utime(lib, ns=(later, later))
    assert "mca:pmix:pmix4:version" in ompi_info_text() and runs() == 4
    install("4.1.6")  # an upgrade: another binary
    assert 'component:4.1.6' in ompi_info_text() and runs() == 6
    assert ompi_info_text().count("component:4.1.6") == 2 and runs() == 6


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]", b'{"binary": null, "pkglibdir": null, "text": 5}'])
def test_a_damaged_cache_is_ignored_and_rewritten(fake_ompi, damage):
    _, _, runs, cache = fake_ompi
    cache.parent.mkdir(parents=True)
    cache.write_bytes(damage)
    assert "mca:pmix:ext3x" in ompi_info_text() and runs() == 2
    assert "mca:pmix:ext3x" in ompi_info_text() and runs() == 2


def test_a_read_only_cache_folder_reads_ompi_info_each_time(fake_ompi):
    _, _, runs, cache = fake_ompi
    cache.parent.mkdir(parents=True)
    cache.parent.chmod(0o500)
    try:
        if os.access(cache.parent, os.W_OK):  # root writes anyway: make the cache a folder, which cannot be written
            cache.parent.chmod(0o700)
            cache.mkdir()
        assert "mca:pmix:ext3x" in ompi_info_text() and "mca:pmix:ext3x" in ompi_info_text() and runs() == 4
    finally:
        cache.parent.chmod(0o700)


def test_without_ompi_info_there_is_no_text(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DLRUN_CACHE_DIR", str(tmp_path / "cache"))
    assert ompi_info_text() == "" and not Path(tmp_path / "cache").exists()
