"""No function in the package is over cyclomatic complexity 20 (radon's count) or 60 lines, apart from the
harness's model definitions; the few that still are are listed here, and the list may only shrink."""
from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

PACKAGE = Path(__file__).resolve().parents[1] / "launcher" / "dlrun"
MAX_COMPLEXITY = 20
MAX_LINES = 60
#: Model definitions of the in-container harness: a network's layers are written out as its paper draws them.
EXEMPT_FILES = {"harness/harness_pytorch_models.py", "harness/harness_tensorflow_models.py"}
#: Functions still over a limit, to be split: "file:function" -> why it is still here. Remove an entry when its
#: function is split (the test fails while an entry is stale, so the list shrinks and never hides a new one).
KNOWN: dict[str, str] = {
}


def _functions():
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name in EXEMPT_FILES:
            continue
        for block in cc_visit(path.read_text()):
            for item in [block, *getattr(block, "methods", []), *getattr(block, "closures", [])]:
                if getattr(item, "is_method", None) is None and hasattr(item, "methods"):
                    continue  # a class: its methods are listed themselves
                yield f"{name}:{item.name}", item.complexity, item.endline - item.lineno + 1


def test_no_function_over_complexity_20_or_60_lines_apart_from_the_listed_ones():
    over = {where: (complexity, lines) for where, complexity, lines in _functions()
            if complexity > MAX_COMPLEXITY or lines > MAX_LINES}
    new = {where: shape for where, shape in over.items() if where not in KNOWN}
    assert new == {}, f"split these (complexity, lines): {new}"
    stale = sorted(set(KNOWN) - set(over))
    assert stale == [], f"no longer over a limit: remove from KNOWN: {stale}"
