"""The dlrun command line (typer + rich): one module per command group, put together in `dlrun.cli.app`."""
