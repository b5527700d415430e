"""Schedulers: turn a launch into a submission (script + how to start it) and know how to wait.
One module per scheduler, declared in `dlrun.registry.SCHEDULERS` and imported when first chosen."""
