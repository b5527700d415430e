"""The `dlrun` application: the command groups put together, and the entry point.

Every command group lives in its own module and knows nothing of this one. Heavy modules (pydantic
catalogs, torch, docker) are imported inside the commands, so `dlrun --help` and shell completion stay fast.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Annotated

import typer

from dlrun import __version__
from dlrun.cli import (catalogs, check, compare, diagnose, doctor, experiments, measure, report, reproduce, results,
                       run, tune)
from dlrun.cli.data import data_app
from dlrun.cli.images import images_app

#: Commands that only read the store (and write their output whole, closed) and leave without the
#: interpreter's teardown (see _quick_exit).
QUICK_EXIT = frozenset({"compare", "report"})

app = typer.Typer(
    name="dlrun",
    help="Run reference deep-learning workloads with pinned software stacks, like-for-like, on any system.\n\n"
         "Example: `dlrun run resnet50`, or as a shorthand `dlrun --image tf1.14-nccl --nodes 8 --system txgaia "
         "resnet50`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("run")(run.run)
app.command("plan")(run.plan)
app.command("tune")(tune.tune)
app.command("doctor")(doctor.doctor)
app.command("parse")(results.parse)
app.command("schema")(catalogs.schema)
app.command("reproduce")(reproduce.reproduce)
app.add_typer(images_app, name="images")
app.add_typer(catalogs.workloads_app, name="workloads")
app.add_typer(catalogs.systems_app, name="systems")
app.add_typer(results.results_app, name="results")
app.command("compare")(compare.compare)
app.command("check")(check.check)
app.command("diagnose")(diagnose.diagnose)
app.command("report")(report.report)
app.add_typer(measure.measure_app, name="measure")
app.add_typer(experiments.experiments_app, name="experiments")
app.add_typer(data_app, name="data")


def _version(value: bool) -> None:
    if value:
        print(f"dlrun {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                        help="Print the version and exit.")] = False) -> None:
    pass


GLOBAL_FLAGS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


def commands() -> set[str]:
    """Names of the top-level commands and command groups."""
    names = {info.name for info in app.registered_commands} | {info.name for info in app.registered_groups}
    return {name for name in names if name}


def normalise_argv(argv: list[str]) -> list[str]:
    """Accept the design card's form `dlrun --image tf1.14-nccl --nodes 8 resnet50` as `dlrun run ...`."""
    if not argv or argv[0] in commands() or argv[0] in GLOBAL_FLAGS:
        return argv
    return ["run", *argv]


def main() -> None:
    # click's UsageError, whether typer vendors click (>= 0.20) or depends on it: BadParameter's base.
    ClickUsageError = typer.BadParameter.__mro__[1]
    argv = normalise_argv(sys.argv[1:])
    painter = report.early_painter(argv)
    run.begin_early_look(argv)  # `dlrun run`: the node's inventory beside typer's parsing of its options
    try:
        code = app(args=argv, prog_name="dlrun", standalone_mode=False, obj={"painter": painter})
    except ClickUsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        from dlrun.text import plain

        print(f"dlrun: error: {plain(exc.format_message(), newlines=False)}{hint}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    finally:
        if painter is not None:
            painter.close()  # the report closed it already, unless the command line was refused
    code = code if isinstance(code, int) else 0
    if argv and argv[0] in QUICK_EXIT and threading.active_count() == 1:
        _quick_exit(code)
    sys.exit(code)


def _quick_exit(code: int) -> None:
    """Leave without tearing the interpreter down: after a report, freeing pandas', numpy's and the
    catalog's objects one by one takes 0.25 s, an eighth of its time goal. Only for QUICK_EXIT's commands,
    which write their files whole and close them before they return, and only with no other thread left;
    the atexit handlers (temporary files, multiprocessing's children) still run."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
