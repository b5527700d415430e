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


def test_own_workloads_go_where_the_docs_say(tmp_path):
    """The catalog folder docs/workloads.md names for a site's own workloads is one dlrun reads: its YAML
    example, put there, is a workload `dlrun workloads show` finds."""
    import re

    text = (REPO / "docs" / "workloads.md").read_text()
    section = text[text.index("## Bring your own workload"):]
    [folder] = set(re.findall(r"`~/\.config/dlrun/([\w-]+)/\*\.yaml`", section))
    example = section[section.index("```yaml\n") + len("```yaml\n"):]
    example = example[:example.index("```")]
    config = tmp_path / "config"
    (config / "dlrun" / folder).mkdir(parents=True)
    (config / "dlrun" / folder / "mine.yaml").write_text(example)
    env = {key: value for key, value in os.environ.items() if key != "DLRUN_PATH"}
    proc = subprocess.run([sys.executable, "-m", "dlrun.cli", "workloads", "show", "osu_latency_8b"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**env, "XDG_CONFIG_HOME": str(config), "DLRUN_HOME": str(tmp_path / "home")})
    assert proc.returncode == 0, f"~/.config/dlrun/{folder}/: {proc.stderr}"
    assert "once per node" in proc.stdout
