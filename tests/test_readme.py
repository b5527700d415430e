"""Every command line of README.md's fenced blocks, and every example in a `--help` text, runs and works as
printed (tests/readme_commands.py says what a line runs and the few things changed for a test machine).

The README is followed as a newcomer follows it: a fresh HOME (so DLRUN_HOME, the config and the caches are
their defaults under it), the checkout's Python, the site's image store where cpu-reference is built (the
session's `cpu_reference` fixture, and its SIF: `cpu_reference_sif`, with the real Apptainer on PATH), a store that already holds ResNet-50 runs of the seed systems dgx2 and
dgx1v (what a site's store, or the bundles it imported, holds: the compare and report lines read them), the
real logs its import-log lines name, and an SSH key where the README's export line signs with one.
The sharing example runs at two sites: the importing site is a second HOME, given the bundle and the public
key the exporting site wrote."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from fixtures_apptainer import SHIMS
from readme_commands import Block, Line, Outcome, Part, blocks, prepare, run_part


README = REPO / "README.md"


def documents() -> list[tuple[Path, str]]:
    """The README, then the docs pages in the order of mkdocs.yml's navigation (the order a reader follows)."""
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    pages = [page for entry in nav for value in entry.values()  # a section (Reference) holds its pages
             for page in (value if isinstance(value, list) else [value])
             for page in (page.values() if isinstance(page, dict) else [page])]
    return [(README, "README")] + [(REPO / "docs" / page, f"docs/{page}") for page in pages]
#: Real logs the README's import-log lines read (tests/data/logs/SOURCES.md says where each was published): an
#: nccl-tests all_reduce_perf run, and tf_cnn_benchmarks' ResNet-101 on 2 GPUs of one node (TF 1.14, Horovod).
LOGS = {"all_reduce_perf.log": REPO / "tests" / "data" / "logs" / "nccl-tests" / "superbench_allreduce_g8.log",
        "tf_cnn.log": REPO / "tests" / "data" / "logs" / "tf_cnn_benchmarks" / "mpioperator_horovod_2gpu_tf1.14.log"}
#: Site variables a run of the README must not inherit from the machine that runs the tests.
SITE_VARIABLES = ("DLRUN_HOME", "DLRUN_PATH", "DLRUN_SITE", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
                  "DLRUN_IMAGES_DIR", "DLRUN_IMAGES_LOCK", "DLRUN_CACHE_DIR", "VIRTUAL_ENV")


def _commands() -> set[str]:
    from dlrun.cli.app import commands

    return commands()


def _env(home: Path) -> dict[str, str]:
    """This environment without the machine's dlrun settings, HOME `home`, and the checkout's Python first
    on PATH (as after the README's `. .venv/bin/activate`, which the blocks after the first one assume)."""
    env = {key: value for key, value in os.environ.items() if key not in SITE_VARIABLES}
    env.update(HOME=str(home), PATH=f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}", REPO=str(REPO),
               VENV=sys.prefix, PYTHON=sys.executable, USER=os.environ.get("USER") or "root")
    return env


def _site(root: Path, name: str, image_env: dict[str, str], dataset: Path) -> tuple[dict[str, str], Path]:
    """(environment, working folder) of one site: its own HOME, the checkout's Python as `.venv`."""
    home, cwd = root / f"home-{name}", root / f"site-{name}"
    home.mkdir(parents=True)
    cwd.mkdir(parents=True)
    (cwd / ".venv").symlink_to(sys.prefix)
    return {**_env(home), **image_env, "DATASET": str(dataset)}, cwd


def _sites(tmp_path: Path, image_env: dict[str, str]):
    """The two sites' environments and folders (empty stores), a dataset, the real logs and a signing key."""
    dataset = tmp_path / "dataset"
    made = subprocess.run([sys.executable, "-m", "dlrun.cli", "data", "synth", "--format", "jpeg", "--images", "16",
                           "--classes", "2", "--size", "64", str(dataset)], capture_output=True, text=True,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert made.returncode == 0, made.stderr
    a_env, a_cwd = _site(tmp_path, "a", image_env, dataset)
    a_env["DLRUN_SITE"] = "hpc.example.org"  # a named site, as "Share results between sites" sets up
    b_env, b_cwd = _site(tmp_path, "b", image_env, dataset)
    for env in (a_env, b_env):
        env["PATH"] = f"{env['PATH']}{os.pathsep}{SHIMS}"
    home_a = Path(a_env["HOME"])  # no stored runs: what a fresh clone has (the README's make demo imports samples)
    for name, log in LOGS.items():
        shutil.copy(log, a_cwd / name)
    (home_a / ".ssh").mkdir(mode=0o700)
    key = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home_a / ".ssh" / "id_ed25519")],
                         capture_output=True, text=True)
    assert key.returncode == 0, key.stderr
    before = set(Path("/tmp").glob("dlrun-stage-*"))
    yield {"a": (a_env, a_cwd), "b": (b_env, b_cwd), "logs": tmp_path / "logs"}
    for copy in set(Path("/tmp").glob("dlrun-stage-*")) - before:  # --stage-data's node-local copies
        shutil.rmtree(copy, ignore_errors=True)


@pytest.fixture
def sites(tmp_path, cpu_reference_sif, cpu_reference_ppc64le):  # the README's ppc64le lines find it built
    """The README's sites: the image store holds cpu-reference's tree and its SIF, both architectures; the real
    Apptainer comes after the venv on PATH."""
    yield from _sites(tmp_path, {key: value for key, value in cpu_reference_sif["env"].items() if key != "PATH"})


@pytest.fixture
def host_sites(tmp_path):
    """The sites of the lines that need none of dlrun's images (runs on the host, dry runs, results): their tests
    run in the other worker, beside the image tests rather than after them."""
    yield from _sites(tmp_path, {})


def _prepared(only: str | None = None, images: bool | None = None) -> list:
    """The blocks of every document (or of the one whose source is `only`), their lines prepared; with `images`
    True only the lines of each block from its first that names dlrun's image on (_needs_images), with False
    only those before it."""
    found = [block for path, source in documents() if only in (None, source) for block in blocks(path, source)]
    if images is not None:
        found = [cut for block in found if (cut := _cut(block, images)).parts]
    for block in found:
        for line in block.lines():
            prepare(line, _commands())
    return found


def _needs_images(line: Line) -> bool:
    """Whether a line builds, pushes, pulls or runs cpu-reference: the lines that need the session's images."""
    return "cpu-reference" in line.text


def _cut(block: Block, images: bool) -> Block:
    lines = block.lines()
    first = next((index for index, line in enumerate(lines) if _needs_images(line)), len(lines))
    keep = {id(line) for line in (lines[first:] if images else lines[:first])}
    parts = [Part(part.site, kept) for part in block.parts if (kept := [l for l in part.lines if id(l) in keep])]
    return Block(block.number, parts)


def _run(block, sites) -> list[Outcome]:
    outcomes = []
    for index, part in enumerate(block.parts):
        env, cwd = sites["b"] if part.site == "importing" else sites["a"]
        if part.site == "importing":  # what the exporting site handed over
            for name in ("hpc.bundle", ".ssh/dlrun-bundle.pub"):
                source = (sites["a"][1] / name) if not name.startswith(".") else Path(sites["a"][0]["HOME"]) / name
                shutil.copy(source, cwd / Path(name).name)
        outcomes += run_part(part, env, cwd, sites["logs"] / f"{block.number}-{index}")
    return outcomes


def _verdicts(outcomes: list[Outcome]) -> list[str]:
    return [outcome.describe() for outcome in outcomes if outcome.failed]


def test_the_readme_is_parsed_into_every_command_line():
    found = _prepared()
    lines = [line for block in found for line in block.lines()]
    assert len(found) == 24 and len(lines) >= 113
    assert {line.text.split()[0] for line in lines} >= {"make", "dlrun", ".", "export", "ssh-keygen", "echo"}
    assert [line.command for line in lines if line.skip] == ["make test"]
    assert [part.site for block in found for part in block.parts if part.site] == ["exporting", "importing"] * 2
    dry = [line for line in lines if "--dry-run" in line.command and "--dry-run" not in line.text]
    assert dry and all(re.search(r"--system (dgx2|txgaia)|images pull", line.text) for line in dry)


def _problems(source: str, sites, images: bool | None = None) -> list[str]:
    """What went wrong running every block of one document (or its lines that need the images, or the others),
    in order, at its sites."""
    problems = []
    for block in _prepared(source, images):
        outcomes = _run(block, sites)
        problems += _verdicts(outcomes)
        unreached = [o.line.number for o in outcomes if o.code is None]
        if unreached and not problems:
            problems.append(f"block at {block.lines()[0].source} line {block.number}: lines {unreached} did not run")
    return problems


#: The docs pages with command lines, run one test each (none of their lines needs dlrun's images).
DOCS_PAGES = [source for path, source in documents()[1:] if blocks(path, source)]


@pytest.mark.mpi
@pytest.mark.tensorflow
@pytest.mark.slow
def test_every_readme_command_on_the_host_works_as_printed(host_sites):
    """The README's lines before its first that needs the images: host runs, dry runs, results, compare."""
    problems = _problems("README", host_sites, images=False)
    assert problems == [], "\n\n".join(problems)


@pytest.mark.slow
def test_every_readme_command_with_the_images_works_as_printed(sites):
    """The README's lines from its first that builds, moves or runs cpu-reference on: in the images' worker."""
    problems = _problems("README", sites, images=True)
    assert problems == [], "\n\n".join(problems)


def test_the_readme_is_split_between_its_two_tests_at_its_first_image_line():
    host, images = _prepared("README", images=False), _prepared("README", images=True)
    everything = _prepared("README")
    assert [line.number for block in host + images for line in block.lines()] == sorted(
        line.number for block in everything for line in block.lines())
    assert images and all(not _needs_images(line) for block in host for line in block.lines())
    assert images[0].lines()[0].text.startswith("dlrun images build cpu-reference")


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("page", DOCS_PAGES)
def test_every_docs_command_works_as_printed(host_sites, page):
    problems = _problems(page, host_sites)
    assert problems == [], "\n\n".join(problems)
    if any(part.site == "importing" for block in _prepared(page) for part in block.parts):
        bundle = host_sites["b"][1] / "hpc.bundle"
        home_b = Path(host_sites["b"][0]["HOME"])
        assert bundle.is_file() and (home_b / ".config" / "dlrun" / "allowed_signers").is_file()


def test_every_document_with_commands_is_run_by_one_of_the_tests():
    with_commands = [source for path, source in documents() if blocks(path, source)]
    assert with_commands == ["README", *DOCS_PAGES] and {"docs/results.md", "docs/running.md"} <= set(DOCS_PAGES)
    assert not any(_needs_images(line) for page in DOCS_PAGES for block in _prepared(page) for line in block.lines())


def test_a_readme_command_that_fails_fails_the_readme_test(tmp_path):
    """A copy of the README with one command broken: the runner reports that line, with what it said."""
    copy = tmp_path / "workloads.md"
    copy.write_text((REPO / "docs" / "workloads.md").read_text().replace("dlrun experiments show E001_table2_model_facts",
                                               "dlrun experiments show E001_table2_model_fact", 1))
    [block] = [block for block in blocks(copy, "docs/workloads.md") if any("E001_table2_model_fact " in f"{line.text} "
                                                      for line in block.lines())]
    part = Part("", block.lines()[:3])
    for line in part.lines:
        prepare(line, _commands())
    outcomes = run_part(part, _env(tmp_path / "home"), tmp_path, tmp_path / "logs")
    assert [o.code for o in outcomes] == [0, 2, None]  # the third line is not reached
    [problem] = _verdicts(outcomes)
    assert problem.startswith(f"docs/workloads.md line {block.lines()[1].number}: dlrun experiments show "
                              "E001_table2_model_fact")
    assert "unknown experiment 'E001_table2_model_fact'" in problem and "did you mean 'E001_table2_model_facts'" in problem


def _help_examples() -> list[tuple[str, str]]:
    """(command path, example) for each `Example: ...` in a help text, the examples written in backquotes."""
    import typer

    from dlrun.cli.app import app

    found = []

    def walk(command, path: str) -> None:
        texts = [command.help or ""] + [getattr(param, "help", None) or "" for param in command.params]
        for text in texts:
            for example in re.findall(r"Examples?:(.*)", text, re.S):
                found.extend((path, cmd) for cmd in re.findall(r"`(dlrun [^`]+)`", example))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "dlrun")
    return found


def test_every_help_example_works(tmp_path):
    examples = _help_examples()
    assert ("dlrun", "dlrun run resnet50") in examples
    assert ("dlrun doctor", "dlrun doctor --system txgaia --image pytorch1.0-horovod --fabric roce") in examples
    lines = [prepare(Line(index, example), _commands()) for index, (_, example) in enumerate(examples, 1)]
    outcomes = run_part(Part("", lines), _env(tmp_path / "home"), tmp_path, tmp_path / "logs")
    problems = [o.describe().replace("README line", "help example", 1) for o in outcomes if o.failed or o.code is None]
    assert problems == [], "\n\n".join(problems)
