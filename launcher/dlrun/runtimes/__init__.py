"""Container runtimes: each wraps one rank's command for its runtime (binds, devices, env, GPUs)."""
import importlib

from dlrun.registry import Registry
from dlrun.runtimes.base import Runtime

RUNTIMES: Registry[Runtime] = Registry("runtime")

# One module per runtime; each registers itself. A module not written yet is skipped, nothing else is.
for _module in ("host", "singularity", "enroot", "docker", "charliecloud"):
    try:
        importlib.import_module(f"dlrun.runtimes.{_module}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"dlrun.runtimes.{_module}":
            raise

__all__ = ["RUNTIMES", "Runtime"]
