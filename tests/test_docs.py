"""The documentation builds as a site, with warnings as errors (`make docs`), and links only to pages that
exist; its command lines are run by tests/test_readme.py with the README's."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_the_docs_build_with_warnings_as_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir",
                           str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index", "concepts", "running", "workloads", "results", "layout"):
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), page
    assert "Secrets" in (tmp_path / "site" / "running" / "index.html").read_text()


def test_the_readme_is_a_first_screen_and_points_at_every_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert readme.splitlines()[7:11] == ["```bash", readme.splitlines()[8], readme.splitlines()[9], "```"]
    assert readme.splitlines()[8].startswith("make demo") and readme.splitlines()[9].startswith("make test")
    for page in ("concepts", "running", "workloads", "results", "layout"):
        assert f"(docs/{page}.md)" in readme, page
