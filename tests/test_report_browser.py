"""`dlrun report` opened in a real headless Chromium: the page renders, every plot loads from the folder
(nothing fetched), at the size the page states."""
from __future__ import annotations

import pytest
from browser import check_in_browser
from conftest import run_cli
from report_data import fill, no_model_counts, read


@pytest.mark.browser
def test_report_renders_in_headless_chromium(dlrun_home, tmp_path):
    fill(dlrun_home)
    out = tmp_path / "report"
    proc = run_cli("report", "--out", str(out), env=no_model_counts(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    page = read(out)
    assert [img["src"] for img in page.images] == ["scaling.png", "bars.png"]
    check_in_browser(out, tmp_path, page)
