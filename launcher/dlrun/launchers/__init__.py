"""How ranks start: each turns one rank command into the command that starts all ranks."""
from dlrun.launchers.base import Launch, Launcher
from dlrun.registry import Registry

LAUNCHERS: Registry[Launcher] = Registry("launcher")

from dlrun.launchers import horovodrun, jsrun, mpirun, single, srun, torchrun  # noqa: E402,F401  (registers)

__all__ = ["LAUNCHERS", "Launch", "Launcher"]
