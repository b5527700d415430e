"""`dlrun images list` (the catalog view); the image commands (show, render, build, pull, push, save, load,
verify, lock) are added from dlrun.images.cli."""
from __future__ import annotations

import typer

from dlrun.cli.options import JsonOpt, load_catalog
from dlrun.cli.output import handle_errors, print_json, table
from dlrun.images.cli import add_commands

images_app = typer.Typer(help="Container images: the pinned software stacks.", no_args_is_help=True)


@images_app.command("list")
@handle_errors
def images_list(as_json: JsonOpt = False) -> None:
    """List images."""
    images = load_catalog().images
    if as_json:
        print_json([img.model_dump(mode="json") for img in images.values()])
        return
    table("images", ["name", "kind", "arch", "framework", "description"],
          [[i.name, i.kind, ",".join(i.arch), f"{i.framework} {i.framework_version or ''}", i.description]
           for i in images.values()])


add_commands(images_app)
