"""Container runtimes: each wraps one rank's command for its runtime (binds, devices, env, GPUs).
One module per runtime, declared in `dlrun.registry.RUNTIMES` and imported when first chosen."""
