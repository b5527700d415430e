"""The package's layers look down only: the order in ARCHITECTURE.md, every import checked (function-level and
TYPE_CHECKING ones included), no cycles; the in-container harness imports nothing from dlrun; modules stay
small. The checker itself is shown to catch an upward import and a cycle in a synthetic package."""
from __future__ import annotations

from pathlib import Path

import layercheck
import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "launcher" / "dlrun"
LAYERS = layercheck.read_layers((REPO / "ARCHITECTURE.md").read_text())
MAX_LINES = 400


def test_every_module_is_in_a_layer_imports_only_downward_and_no_cycles():
    assert layercheck.check(PACKAGE, LAYERS) == []


def test_the_harness_files_import_nothing_from_dlrun():
    harness = [p for p in (PACKAGE / "harness").glob("*.py") if p.name != "__init__.py"]
    assert harness, "no harness files found"
    modules = layercheck.package_modules(PACKAGE)
    edges = layercheck.import_edges(modules, "dlrun")
    names = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts) for p in harness}
    assert [e for e in edges if e.source in names] == []


def test_modules_stay_small():
    big = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES
           and not (p.parent.name == "harness" and "models" in p.name)}
    assert big == {}


# ------------------------------------------------------------------------------- the checker can fail
def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


SYNTHETIC_LAYERS = layercheck.read_layers("```layers\npkg pkg.base\npkg.low\npkg.high\n```\n")
CLEAN = {"__init__.py": "", "base.py": "X = 1\n", "low.py": "from pkg.base import X\n",
         "high.py": "from pkg import low\nimport pkg.base\n"}


def test_checker_passes_a_clean_synthetic_package(tmp_path):
    assert layercheck.check(_package(tmp_path, CLEAN), SYNTHETIC_LAYERS) == []


@pytest.mark.parametrize("upward", [
    "from pkg.high import thing\n",                                        # module level
    "def f():\n    from pkg import high\n    return high\n",               # inside a function
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n",  # type-only
    "from .high import thing\n",                                           # relative
])
def test_checker_fails_on_an_upward_import(tmp_path, upward):
    problems = layercheck.check(_package(tmp_path, {**CLEAN, "low.py": CLEAN["low.py"] + upward}),
                                SYNTHETIC_LAYERS)
    assert any("pkg.low imports pkg.high, which is in a layer above it" in p for p in problems), problems


def test_checker_fails_on_a_cycle_within_a_layer(tmp_path):
    files = {**CLEAN, "low.py": "import pkg.low2\n", "low2.py": "def f():\n    import pkg.low\n"}
    layers = layercheck.read_layers("```layers\npkg pkg.base\npkg.low pkg.low2\npkg.high\n```\n")
    assert layercheck.check(_package(tmp_path, files), layers) == ["import cycle: pkg.low -> pkg.low2"]


def test_checker_fails_on_packages_of_one_layer_that_depend_on_each_other(tmp_path):
    """No module imports another in a loop, yet the packages do: a.x -> b.y and b.z -> a.w."""
    files = {**CLEAN, "a/__init__.py": "", "a/x.py": "import pkg.b.y\n", "a/w.py": "",
             "b/__init__.py": "", "b/y.py": "", "b/z.py": "from pkg.a import w\n"}
    layers = layercheck.read_layers("```layers\npkg pkg.base\npkg.low\npkg.a pkg.b\npkg.high\n```\n")
    assert layercheck.check(_package(tmp_path, files), layers) == [
        "entries of one layer depend on each other: pkg.a <-> pkg.b"]
    one_way = {**files, "b/z.py": ""}
    assert layercheck.check(_package(tmp_path / "one-way", one_way), layers) == []


def test_checker_fails_on_a_package_split_over_two_layers_around_another(tmp_path):
    """Every import points down, yet a package whose parts sit below and above another package forms a loop
    with it: a.low <- b.mid <- a.high."""
    files = {**CLEAN, "a/__init__.py": "", "a/low.py": "", "a/high.py": "import pkg.b.mid\n",
             "b/__init__.py": "", "b/mid.py": "from pkg.a import low\n"}
    layers = layercheck.read_layers("```layers\npkg pkg.base\npkg.low\npkg.a pkg.a.low\npkg.b\npkg.a.high\n"
                                    "pkg.high\n```\n")
    assert layercheck.check(_package(tmp_path, files), layers) == ["packages depend on each other: pkg.a <-> pkg.b"]
    apart = {**files, "a/high.py": ""}
    assert layercheck.check(_package(tmp_path / "apart", apart), layers) == []


def test_launchers_and_schedulers_depend_one_way():
    """Schedulers call launchers' functions; a launcher sees its scheduler only through the protocol it defines."""
    edges = layercheck.import_edges(layercheck.package_modules(PACKAGE), "dlrun")
    packages = {(e.source.split(".")[1], e.target.split(".")[1]) for e in edges
                if e.source.count(".") > 1 and e.target.count(".") > 1}
    assert ("schedulers", "launchers") in packages and ("launchers", "schedulers") not in packages


def test_checker_fails_on_a_module_in_no_layer(tmp_path):
    problems = layercheck.check(_package(tmp_path, {**CLEAN, "stray.py": ""}), SYNTHETIC_LAYERS)
    assert problems == ["pkg.stray is in no layer: add it to the layers block"]
