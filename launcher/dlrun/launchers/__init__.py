"""How ranks start: each turns one rank command into the command that starts all ranks.
One module per launcher, declared in `dlrun.registry.LAUNCHERS` and imported when first chosen."""
