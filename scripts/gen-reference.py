#!/usr/bin/env python3
"""Write docs/reference/ (the command line, the catalog schemas, the experiments) from the code
(dlrun.cli.reference); `--check` writes nothing and exits 1 when a page differs from what the code says.
Reads the built-in catalogs only: a site's own (~/.config/dlrun, $DLRUN_PATH) is left out."""
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.pop("DLRUN_PATH", None)
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="dlrun-reference-")  # no site catalog
sys.path.insert(0, str(REPO / "launcher"))

from dlrun.cli.reference import pages  # noqa: E402


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    stale = []
    for name, text in pages().items():
        path = REPO / "docs" / name
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(name)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if check and stale:
        print(f"out of step with the code: {', '.join('docs/' + n for n in stale)}; run scripts/gen-reference.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
