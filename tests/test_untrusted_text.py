"""Strings from outside are data wherever dlrun shows them: rich markup (`[/]`, `[link=...]`), terminal escape
sequences (colours, OSC 8 links), control characters and bidi overrides stored in runs (from bundles, logs
and `import-log --system`) are shown literally, or not at all, by every command that prints them; CSV cells
that a spreadsheet would evaluate are neutralised, and the HTML report escapes them. `[/]` made results
list/show, compare and parse crash with a traceback before; escapes reached the terminal as they were."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrun.results.store import Store
from dlrun.text import csv_cell, for_html, for_plot, for_rich, plain

LOGS = Path(__file__).parent / "data" / "logs"
NASTY = {
    "workload": "[/]",
    "system": "[link=http://x.example/]y[/link]",
    "model": "[bold red]loud",
    "image": "\x1b[31mred\x1b[0m",
    "experiment": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "point": "\u202eevil",
    "precision": "a\rb\x07c\x08d",
}
FORMULA = "=HYPERLINK(\"http://x.example\",\"y\")"
SCRIPT = "<script>alert(1)</script>"
#: What never reaches a terminal: ESC, BEL, BS, CR, the C1 CSI, and the bidi override.
NEVER = ("\x1b", "\x07", "\x08", "\r", "\x9b", "\u202e")


def test_the_text_functions():
    assert [plain(value) for value in NASTY.values()] == [
        "[/]", "[link=http://x.example/]y[/link]", "[bold red]loud", "red", "click", "evil", "abcd"]
    assert plain("tab\there\nline", newlines=False) == "tab here line"
    for value in ("[/]", "\\[b]x", "x\\", "[link=y]z[/link]"):  # rich text: never read as markup
        assert str(for_rich(value)) == value and for_rich(value).spans == []
    assert [csv_cell(v) for v in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "ok", 1.5, None, -2)] == \
        ["'=1+1", "'+1", "'-1", "'@SUM(A1)", "'\tx", "'\rx", "ok", 1.5, None, -2]


def _record(run_id: str, **fields) -> dict:
    return {"id": run_id, "created_at": "2026-01-01T00:00:00Z", "status": "ok", "site": "site-n", "nodes": 1,
            "ranks_per_node": 1, "world_size": 1, "batch_size": 8, "plan": {}, "provenance": {}, **fields}


@pytest.fixture
def nasty_home(dlrun_home) -> Path:
    store = Store(dlrun_home / "results.sqlite")
    rows = [{"metric": "throughput", "value": 10.0 + i, "unit": "images/sec"} for i in range(2)]
    store.add_run(_record("nasty-1", **NASTY), rows[:1])
    store.add_run(_record("nasty-2", **{**NASTY, "model": FORMULA, "image": SCRIPT}), rows[1:])
    return dlrun_home


def _shown(proc, *expected: str) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert [ch for ch in NEVER if ch in out] == [], out
    for text in expected:
        assert text in out, (text, out)
    return out


def test_results_list_and_show_show_stored_strings_as_written(nasty_home):
    _shown(run_cli("results", "list"), "[/]", "red", "nasty-1")
    shown = _shown(run_cli("results", "show", "nasty-1"), *(plain(v) for v in NASTY.values()))
    assert "http://evil.example" not in shown  # the OSC 8 link's target is not printed, nor is it a link
    for command in (["results", "list", "--json"], ["results", "show", "nasty-1", "--json"]):
        proc = run_cli(*command)
        assert proc.returncode == 0
        data = json.loads(proc.stdout)  # JSON escapes every control character itself
        record = data[-1] if isinstance(data, list) else data
        assert {name: record[name] for name in NASTY} == NASTY


def test_compare_shows_them_and_its_csv_neutralises_formulas(nasty_home):
    _shown(run_cli("compare"), "[/]", "[bold red]loud", "red")
    proc = run_cli("compare", "--csv")
    _shown(proc)
    cells = [cell for row in csv.reader(io.StringIO(proc.stdout)) for cell in row]
    assert "'" + FORMULA in cells and FORMULA not in cells


def test_csv_export_neutralises_formulas(nasty_home, tmp_path):
    out = tmp_path / "runs.csv"
    _shown(run_cli("results", "export", "--out", str(out)))
    rows = list(csv.DictReader(out.open(newline="")))
    assert sorted(row["model"] for row in rows) == sorted(["[bold red]loud", "'" + FORMULA])
    assert {row["precision"] for row in rows} == {"abcd"} and {row["image"] for row in rows} == {"red", SCRIPT}
    assert all(not value.startswith(("=", "+", "@")) for row in rows for value in row.values())


def test_parse_and_import_log_show_a_logs_strings_as_written(dlrun_home, tmp_path):
    log = tmp_path / "hostile.log"  # the real Horovod log, its model line replaced
    text = (LOGS / "horovod" / "issue712_pytorch_synthetic_4gpu.log").read_text()
    log.write_text(text.replace("Model: resnet50", "Model: [/]\x1b[2J"))
    _shown(run_cli("parse", str(log)), "[/]")
    assert json.loads(_shown(run_cli("parse", str(log), "--json")))["model"] == "[/]\x1b[2J"
    _shown(run_cli("results", "import-log", str(log), "--system", "[link=http://x.example/]sys[/link]"),
           "imported 1 run")
    _shown(run_cli("results", "list"), "[link=http://x.example/]sys[/link]")
    _shown(run_cli("compare"), "[/]")


def test_errors_and_the_report_show_them_as_written(nasty_home, tmp_path):
    proc = run_cli("results", "show", "[/]\x1b[31m")
    assert proc.returncode == 2 and "[/]" in proc.stderr and "\x1b" not in proc.stderr
    html = tmp_path / "report"
    _shown(run_cli("report", "--out", str(html), "--allow-mismatch"), "wrote")  # no machine recorded: unknown
    page = (html / "index.html").read_text()
    assert "[/]" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page


def test_the_run_summary_and_a_failure_reason(capsys):
    from dlrun.cli.progress import print_summary
    from dlrun.execute.record import RunRecord

    print_summary(RunRecord(id="r1", path=Path("/tmp/r1"), status="failed", exit_code=1,
                            reason="rank 0 ended: [/] \x1b]8;;http://evil.example/\x1b\\x\x1b]8;;\x1b\\ [link=y]z"))
    out = capsys.readouterr().out
    assert "[/]" in out and "[link=y]z" in out and "\x1b" not in out and "evil.example" not in out


TEXT = st.lists(st.sampled_from(list("[]/\\=:@#ab ") + ["\x1b", "\x07", "\r", "\x9b", "\u202e", "\t", "link=",
                                                         "bold", "\x1b[", "\x1b]8;;"]),
                min_size=1, max_size=10).map("".join)


@settings(max_examples=40, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=TEXT)
def test_fuzz_every_command_that_prints_stored_strings(dlrun_home, value):
    """Any stored string, in every text field of a run: the commands that print it end well, send the
    terminal no control character, and show what `plain` keeps of it."""
    from typer.testing import CliRunner

    from dlrun.cli.app import app

    store = Store(dlrun_home / "results.sqlite")
    store.delete_runs([run["id"] for run in store.list_runs(limit=None)])  # the store's aggregates with them
    fields = {name: value for name in ("workload", "system", "model", "image", "precision", "experiment", "point")}
    store.add_run(_record("fuzzed", site=value, **fields), [{"metric": "throughput", "value": 1.0, "unit": "x"}])
    runner = CliRunner()
    kept = " ".join(plain(value, newlines=False).split())
    for command in (["results", "list"], ["results", "show", "fuzzed"], ["compare"], ["compare", "--csv"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, (command, result.output, result.exception)
        assert [ch for ch in NEVER if ch in result.output] == [], command
        if kept and command != ["compare", "--csv"]:
            assert kept in " ".join(result.output.split()), (command, kept, result.output)


#: The attack of issue 36 (break 9): an OSC 8 hyperlink, a screen clear and a bell in stored names, and in
#: the user's --title.
HOSTILE = {"workload": "w\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07", "system": "sys\x1b[2J\x07",
           "model": "m\x1b[31m$\\frac{1}{$"}


def test_the_report_page_its_plots_and_stderr_hold_no_control_character(dlrun_home, tmp_path):
    store = Store(dlrun_home / "results.sqlite")
    for index, ranks in enumerate((1, 2, 4)):  # three points, so that both plots draw every label
        store.add_run(_record(f"hostile-{index}", ranks_per_node=ranks, world_size=ranks, **HOSTILE),
                      [{"metric": "throughput", "value": 10.0 * ranks, "unit": "images/sec"}])
    out = tmp_path / "report"
    proc = run_cli("report", "--out", str(out), "--allow-mismatch", "--title", "T\x1b[2J\x07itle\x1b]8;;http://x/\x07")
    shown = _shown(proc, "wrote")
    assert "Glyph" not in shown and "evil.example" not in shown
    page = (out / "index.html").read_text()
    assert [ch for ch in NEVER if ch in page] == [], [ch for ch in NEVER if ch in page]
    assert "<title>Title</title>" in page and "syswclick" not in page and "sys" in page
    assert sorted(p.name for p in out.glob("*.png")) == ["bars.png", "scaling.png"]


def test_every_plot_label_is_drawn_as_text(tmp_path):
    """Titles, axis labels, legends, ticks and annotations of a figure: control characters dropped and
    `$...$` drawn as written (mathtext would refuse `$\\frac{$` and end the report)."""
    from dlrun.report.plots import _figure, _save

    fig = _figure(4, 3)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([1, 2], [1, 2], label="line \x1b[31m$\\frac{$")
    ax.set_title("t\x07\x1b]8;;http://evil.example/\x1b\\x")
    ax.set_xticks([1, 2])
    ax.set_xticklabels(["a\x1b[2J", "$x^$"])
    ax.annotate("src\r\x08", (1, 1))
    ax.legend()
    _save(fig, tmp_path, "x.png", "t", "alt")
    texts = [t.get_text() for t in fig.findobj(lambda artist: hasattr(artist, "get_parse_math"))]
    assert "line $\\frac{$" in texts and "tx" in texts and "a" in texts and "src" in texts
    assert not any(ch in text for text in texts for ch in NEVER)
    assert (tmp_path / "x.png").stat().st_size > 0


def _modules():
    import ast

    root = Path(__file__).resolve().parents[1] / "launcher" / "dlrun"
    for path in sorted(root.rglob("*.py")):
        if "harness" not in path.parts:
            yield path.relative_to(root).as_posix(), ast.parse(path.read_text())


def test_outside_text_reaches_html_plots_and_csv_only_through_dlrun_text():
    """The one sanitiser: no module but dlrun.text escapes HTML itself; plots are saved in one place (which
    draws every label through for_plot); every CSV writer holds its cells to csv_cell."""
    import ast

    for name, tree in _modules():
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names} | {node.module for node in ast.walk(tree)
                                                if isinstance(node, ast.ImportFrom) and node.module}
        calls = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute)}
        if name != "text.py":
            assert not {"html", "escape"} & imported, f"{name} escapes HTML itself; use dlrun.text.for_html"
        if "savefig" in calls:
            assert name == "report/plots.py", f"{name} saves a figure; use dlrun.report.plots._save"
        if {"to_csv", "writer", "DictWriter"} & calls and "csv" in imported | calls:
            assert "csv_cell" in ast.dump(tree), f"{name} writes CSV cells without dlrun.text.csv_cell"


ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=30) | TEXT


@settings(max_examples=300, derandomize=True, deadline=None, database=None, print_blob=False)
@given(value=ANY_TEXT)
def test_fuzz_the_sanitiser_for_every_output(value):
    """Whatever the text: HTML that says what plain() keeps and holds no markup, a plot label and a CSV cell
    with no control character, a terminal line the same."""
    import html

    shown = for_html(value)
    assert html.unescape(shown) == plain(value) and not set("<>\"'") & set(shown)
    for out in (shown, for_plot(value), plain(value), str(csv_cell(plain(value)))):
        assert [ch for ch in NEVER if ch in out] == [], (value, out)
    assert "\n" not in for_plot(value)
    assert not str(csv_cell(plain(value))).startswith(("=", "+", "-", "@"))


@settings(max_examples=12, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=TEXT | st.sampled_from(["$\\frac{$", "$x^$", "a$b$c", "\x1b]8;;http://e/\x07x"]))
def test_fuzz_the_report_with_stored_strings_and_titles(dlrun_home, tmp_path, value):
    """Any stored string and title through the whole report: it ends well, and its page holds no control
    character."""
    from typer.testing import CliRunner

    from dlrun.cli.app import app

    store = Store(dlrun_home / "results.sqlite")
    store.delete_runs([run["id"] for run in store.list_runs(limit=None)])  # the store's aggregates with them
    for index, ranks in enumerate((1, 2)):
        store.add_run(_record(f"fuzzed-{index}", ranks_per_node=ranks, world_size=ranks, workload=value, system=value,
                              model=value), [{"metric": "throughput", "value": 1.0 + ranks, "unit": "images/sec"}])
    out = tmp_path / "report"
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--allow-mismatch", "--title", value])
    assert result.exit_code == 0, (result.output, result.exception)
    page = (out / "index.html").read_text()
    assert [ch for ch in NEVER if ch in page + result.output] == []
