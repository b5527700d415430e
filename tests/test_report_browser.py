"""`dlrun report` opened in a real headless Chromium: the page renders, every plot loads from the folder
(nothing fetched), at the size the page states."""
from __future__ import annotations

import pytest
from browser import check_in_browser, overflow
from conftest import run_cli
from report_data import fill, no_model_counts, read


def _report(dlrun_home, tmp_path):
    """A report of the test store's runs, written into tmp_path/report."""
    fill(dlrun_home)
    out = tmp_path / "report"
    proc = run_cli("report", "--out", str(out), env=no_model_counts(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.browser
def test_report_renders_in_headless_chromium(dlrun_home, tmp_path):
    out = _report(dlrun_home, tmp_path)
    page = read(out)
    assert [img["src"] for img in page.images] == ["scaling.png", "bars.png"]
    check_in_browser(out, tmp_path, page)


@pytest.mark.browser
def test_no_table_reaches_past_a_1400_px_window(dlrun_home, tmp_path):
    """Every table of the page fits a 1400 px wide window: the page scrolls down, never sideways."""
    out = _report(dlrun_home, tmp_path)
    page, window, wide = overflow(out, tmp_path, 1400)
    assert window == 1400 and wide == [] and page <= window, (page, window, wide)
