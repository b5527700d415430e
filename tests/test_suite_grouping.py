"""The suite's own scheduling: the tests that need one resource (an image store, a container engine, the Slurm
cluster) run in one pytest-xdist worker, so that each session fixture is made once (`make test`). Proven on a
small suite that uses this suite's conftest hook, under the real xdist with two workers."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SUITE = '''
import pytest

@pytest.fixture
def registry():  # the name of a resource fixture (conftest.RESOURCE_FIXTURES): its tests are one group
    return None

@pytest.mark.parametrize("i", range(6))
def test_needs_the_resource(registry, i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass

@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request):  # as fixtures_postgres's: its postgresql tests reach the server, one group
    return request.param

@pytest.mark.parametrize("i", range(3))
def test_on_both_backends(store_location, i):
    pass
'''

CONFTEST = f'''
import importlib.util
spec = importlib.util.spec_from_file_location("dlrun_suite_conftest", {str(TESTS / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_collection_modifyitems = suite.pytest_collection_modifyitems
'''


def test_a_resources_tests_run_in_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_small.py").write_text(SUITE)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "DLRUN_TEST_TIMELINE": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = re.findall(r"\[(gw\d)\].*PASSED \S+::(test_\w+)\[([\w-]+)\](@\w+)?", proc.stdout)
    grouped = {(worker, group) for worker, test, _, group in ran if test == "test_needs_the_resource"}
    assert len(ran) == 18 and len(grouped) == 1 and grouped.pop()[1] == "@images", proc.stdout
    backends = {(params.split("-")[0], worker, group) for worker, test, params, group in ran
                if test == "test_on_both_backends"}
    on_server = {(worker, group) for backend, worker, group in backends if backend == "postgresql"}
    assert len(on_server) == 1 and on_server.pop()[1] == "@postgres", proc.stdout
    assert {group for backend, _, group in backends if backend == "sqlite"} == {""}, proc.stdout
