"""The command lines of the fenced blocks of README.md and of the docs/ pages, and of the examples in `--help`
texts, and how
tests/test_readme.py runs them: each block in one bash session (an `export` or `. .venv/bin/activate` holds
for the lines after it), line after line, stopping at the first line that fails.

What a line runs is what it prints, with these changes only (each one said in `Line.why`):
- `dlrun run` (or the shorthand) and `dlrun reproduce` naming a system other than this machine get `--dry-run`:
  that system's cluster is not here, its job is rendered instead;
- a real `dlrun run` gets tiny sizes (`--steps 1 --warmup-steps 1 --batch-size 2`, each only where the line
  does not set it; no batch for a storage workload), `dlrun measure matmul` a small product (`--size 256 --repeats 1`);
- `dlrun images pull` gets `--dry-run`: no registry is reachable from the machines that test dlrun;
- placeholders become real things: `<run-id>` the newest stored run, `/path/to/dataset` a dataset that
  `dlrun data synth` wrote;
- `make TARGET` runs the checkout's Makefile against the Python running the tests, with its set-up taken as
  done (`-o setup -o sysdeps`: the tests run inside it); `make test` is not run, it is what runs this.
A `dlrun doctor` line may exit 1: that is its verdict on this node (a check failed here), not a failure.
"""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\s*$")
#: How a README block says which site its next lines run at (the sharing example).
SITE_MARK = re.compile(r"^#\s*at the (\w+) site\b")
#: Lines whose first word is one of these make a block one of commands to run.
RUNNABLE = ("dlrun", "make")
TINY_RUN = (("--steps", "1"), ("--warmup-steps", "1"), ("--batch-size", "2"))
#: Workloads that train nothing, so take no --batch-size (kind: storage).
NO_BATCH = ("storage_seq_read", "storage_small_files")
TINY_MATMUL = (("--size", "256"), ("--repeats", "1"))
TINY_TUNE = (("--rounds", "2"), ("--knobs", "fused_optimizer"))
NOT_RUN = {"make test": "it runs the test suite, this test among it"}
#: Exit codes that are a command's answer rather than its failure.
ANSWERS = {"doctor": (0, 1)}


@dataclass
class Line:
    number: int                 # 1-based, in its file
    text: str                   # as printed
    source: str = "README"      # the file it is printed in: README, or docs/PAGE.md
    command: str = ""           # what runs
    why: list[str] = field(default_factory=list)
    answers: tuple[int, ...] = (0,)
    skip: str | None = None     # why it is not run


@dataclass
class Part:
    site: str                   # "" or the site a sharing example's lines run at ("exporting", "importing")
    lines: list[Line]


@dataclass
class Block:
    number: int
    parts: list[Part]

    def lines(self) -> list[Line]:
        return [line for part in self.parts for line in part.lines]


def split_comment(text: str) -> tuple[str, str]:
    """(code, comment) of a shell line: the comment starts at a `#` outside quotes after a blank."""
    quote = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"':
                continue
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1].isspace()):
            return text[:index].rstrip(), text[index:]
    return text.rstrip(), ""


def blocks(path: Path, source: str = "README") -> list[Block]:
    """The fenced blocks (```bash or plain ```) holding dlrun or make command lines, split at site marks."""
    found: list[Block] = []
    language, start, lines = None, 0, []  # language is None outside a block
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(raw)
        if fence and language is None:
            language, start, lines = fence.group(1), number, []
        elif fence:
            if language in ("", "bash", "sh") and any(line.text.split()[0] in RUNNABLE for line in lines):
                found.append(Block(start, _parts(lines)))
            language = None
        elif language is not None and raw.strip():
            lines.append(Line(number, raw.strip(), source=source))
    return found


def _parts(lines: list[Line]) -> list[Part]:
    parts = [Part("", [])]
    for line in lines:
        mark = SITE_MARK.match(line.text)
        if mark:
            parts.append(Part(mark.group(1), []))
        elif not line.text.startswith("#"):
            parts[-1].lines.append(line)
    return [part for part in parts if part.lines]


def prepare(line: Line, commands: set[str]) -> Line:
    """Fill in what runs for `line` (see the module's docstring)."""
    code, _ = split_comment(line.text)
    line.command = code
    if code in NOT_RUN:
        line.skip = NOT_RUN[code]
        return line
    words = code.split()
    if words[0] == "make":
        line.command = f'make -C "$REPO" --no-print-directory -o setup -o sysdeps {shlex.join(words[1:])} VENV="$VENV"'
        line.why.append("the checkout's Makefile, with the Python running the tests")
        return line
    for placeholder, value, why in (("<run-id>", '"$(newest_run)"', "the newest stored run"),
                                    ("/path/to/dataset", '"$DATASET"', "a dataset dlrun data synth wrote")):
        if placeholder in line.command:
            line.command = line.command.replace(placeholder, value)
            line.why.append(f"{placeholder}: {why}")
    if words[0] == "dlrun" and not re.search(r"[;|&<>]", code):
        _adapt(line, shlex.split(code)[1:], commands)
    return line


def _adapt(line: Line, argv: list[str], commands: set[str]) -> None:
    command = argv[0] if argv and argv[0] in commands else "run"
    sub = argv[1] if command in ("images", "measure") and len(argv) > 1 else None
    line.answers = ANSWERS.get(command, (0,))
    system = argv[argv.index("--system") + 1] if "--system" in argv[:-1] else None
    extra: list[str] = []
    if command in ("run", "reproduce") and system not in (None, "localhost") and "--dry-run" not in argv:
        extra, why = ["--dry-run"], f"system {system} is a cluster elsewhere: its job is rendered"
    elif command == "run" and "--dry-run" not in argv:
        extra = [arg for option, value in TINY_RUN if option not in argv
                 and not (option == "--batch-size" and ("--global-batch-size" in argv or set(NO_BATCH) & set(argv)))
                 for arg in (option, value)]
        why = "tiny sizes"
    elif (command, sub) == ("measure", "matmul"):
        extra = [arg for option, value in TINY_MATMUL if option not in argv for arg in (option, value)]
        why = "a small product"
    elif command == "tune":
        extra = [arg for option, value in TINY_TUNE if option not in argv for arg in (option, value)]
        why = "the fewest rounds and one knob"
    elif (command, sub) == ("images", "pull") and "--dry-run" not in argv:
        extra, why = ["--dry-run"], "no registry is reachable from the test machines"
    if extra:
        line.command = f"{line.command} {shlex.join(extra)}"
        line.why.append(f"{why}: {shlex.join(extra)}")


@dataclass
class Outcome:
    line: Line
    code: int | None            # None: not reached (an earlier line failed) or not run
    out: str = ""
    err: str = ""

    @property
    def failed(self) -> bool:
        return self.code is not None and self.code not in self.line.answers

    def describe(self) -> str:
        tail = "\n".join((self.out + self.err).strip().splitlines()[-15:])
        return (f"{self.line.source} line {self.line.number}: {self.line.text}\n  ran: {self.line.command}\n"
                f"  exit {self.code}\n  {tail}")


PRELUDE = """\
newest_run() { dlrun results list --limit 1 --json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])'; }
"""


def run_part(part: Part, env: dict[str, str], cwd: Path, logs: Path, timeout: float = 3600) -> list[Outcome]:
    """Run the lines of `part` in one bash session in `cwd`, stopping after the first that fails."""
    logs.mkdir(parents=True, exist_ok=True)
    script = [PRELUDE, f"cd {shlex.quote(str(cwd))}"]
    runnable = [line for line in part.lines if line.skip is None]
    for index, line in enumerate(runnable):
        log = shlex.quote(str(logs / str(index)))
        stop = f'case "$rc" in {"|".join(map(str, line.answers))}) ;; *) exit 0 ;; esac'
        script += ["{", line.command, f"}} > {log}.out 2> {log}.err < /dev/null", f'rc=$?; echo "$rc" > {log}.rc',
                   stop]
    subprocess.run(["bash", "-c", "\n".join(script)], env=env, timeout=timeout, start_new_session=True,
                   stdin=subprocess.DEVNULL, capture_output=True)
    outcomes = []
    for index, line in enumerate(runnable):
        rc = logs / f"{index}.rc"
        read = (lambda suffix: (logs / f"{index}{suffix}").read_text(errors="replace")
                if (logs / f"{index}{suffix}").exists() else "")
        outcomes.append(Outcome(line, int(rc.read_text()) if rc.exists() else None, read(".out"), read(".err")))
    return outcomes
