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
    for page in ("index", "concepts", "running", "workloads", "results", "layout", "reference/cli",
                 "reference/schemas", "reference/experiments"):
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


def test_the_reference_pages_are_the_code_s_own_words():
    """docs/reference/ is what scripts/gen-reference.py makes of the code now (typer's commands through click's
    help records, the catalogs' pydantic JSON Schemas, the built-in experiments): a changed option, field or
    experiment that was not regenerated fails here."""
    env = {key: value for key, value in os.environ.items() if key != "DLRUN_PATH"}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-reference.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_reference_pages_hold_every_command_option_field_and_experiment():
    import typer

    from dlrun.catalog import load_catalog
    from dlrun.catalog.models import WorkloadSpec
    from dlrun.cli.app import app
    from dlrun.cli.reference import pages, usage

    made = pages()
    cli, schemas, experiments = (made[f"reference/{name}.md"] for name in ("cli", "schemas", "experiments"))
    root = typer.main.get_command(app)

    def walk(command, context):
        if hasattr(command, "commands"):  # a group
            for name, sub in command.commands.items():
                yield from walk(sub, sub.context_class(sub, info_name=name, parent=context))
        else:
            yield context.command_path, command, context

    found = list(walk(root, root.context_class(root, info_name="dlrun")))
    assert {"dlrun run", "dlrun results show", "dlrun experiments list"} <= {path for path, _, _ in found}
    for path, command, context in found:
        assert f"`{path}`" in cli and f"\n{usage(command, context)}\n" in cli, path
        assert " ".join(command.get_usage(context).split()) == usage(command, context)  # click's own line
        for param in command.get_params(context):
            record = param.get_help_record(context)
            assert record is None or f"- `{record[0]}`: " in cli, (path, record)
    for field in WorkloadSpec.model_fields:
        assert f"| `{field}` |" in schemas, field
    for experiment in load_catalog().experiments:
        assert f"| `{experiment}` |" in experiments, experiment


#: Fields of the schedulers' own option models (launcher/dlrun/schedulers/), which carry no description yet; a
#: description given to one of them fails the test until it leaves this list, and no other field may lack one.
UNDESCRIBED: set[tuple[str, str]] = set()


def _field_rows(page: str):
    """(model, field, description) of every row of every field table of the schemas page."""
    import re

    model = None
    for line in page.splitlines():
        if line.startswith("#"):
            model = line.lstrip("#").strip()
        row = re.fullmatch(r"\| `(\w+)` \| (.*) \| (.*) \| (.*) \|", line)
        if row:
            yield model, row.group(1), row.group(4)


def test_every_field_on_the_schemas_page_says_what_it_means():
    """Each catalog field's description (its pydantic `Field(description=...)`, which `dlrun schema KIND` carries
    to editors too) is on the page; a field added without one fails here."""
    from dlrun.cli.reference import schemas_page

    page = schemas_page()
    rows = list(_field_rows(page))
    assert len(rows) > 250 and page.count("| field | type | default | description |") > 40
    missing = {(model, field) for model, field, description in rows if not description.strip()}
    assert missing == UNDESCRIBED, sorted(missing ^ UNDESCRIBED)


def test_descriptions_are_data_in_a_table_cell():
    """Text the code gives is shown as written: markup characters, a `|` (a cell edge) and HTML neither end the cell
    nor format anything, in MkDocs' Markdown (and a `|` in a code span is HTML, as GitHub's tables need)."""
    import markdown

    from dlrun.cli.reference import _model

    text = "a|b `c|d` *_TOKEN_* <b>bold</b> [x](http://e) `e` \\ & #1"
    schema = {"properties": {"f": {"type": "string", "default": "x|`y`", "description": text}}}
    page = "\n".join(_model("M", schema, {}))
    html = markdown.markdown(page, extensions=["tables"])
    cells = [cell.split("</td>")[0].replace("&#124;", "|").replace("&#96;", "`")  # entities a browser shows as such
             for cell in html.split("<tbody>")[1].split("<td>")[1:]]
    assert len(cells) == 4, html
    assert cells[3] == "a|b <code>c|d</code> *_TOKEN_* &lt;b&gt;bold&lt;/b&gt; [x](http://e) <code>e</code> \\ &amp; #1"
    assert cells[2] == '<code>&quot;x|`y`&quot;</code>'
