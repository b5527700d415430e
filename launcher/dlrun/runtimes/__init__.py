"""Container runtimes: each wraps one rank's command for its runtime (binds, devices, env, GPUs)."""
from dlrun.registry import Registry
from dlrun.runtimes.base import Runtime

RUNTIMES: Registry[Runtime] = Registry("runtime")

from dlrun.runtimes import host  # noqa: E402,F401  (registers)

__all__ = ["RUNTIMES", "Runtime"]
