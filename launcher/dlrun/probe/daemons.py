"""Container engines that need a service: whether the Docker daemon (or Podman's storage and runtime) answers,
and whether it holds an image. A missing daemon is only found when the first rank starts, otherwise. Which
command asks an engine is the runtime's to say (`dlrun.runtimes.base.ContainerService.status_argv`)."""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return 1, str(exc)
    lines = [line for line in (proc.stdout if proc.returncode == 0 else proc.stderr or proc.stdout).splitlines()
             if line.strip()]
    return proc.returncode, lines[-1].strip() if lines else ""


def engine_status(engine: str, status_argv: Sequence[str], timeout: float = 20) -> tuple[bool, str]:
    """(usable, what it said) of `status_argv`, the cheapest command that fails when the engine cannot run
    containers (Docker: no daemon; Podman: broken storage or OCI runtime configuration): its last line of
    output (Docker's server version), or of its error."""
    if shutil.which(engine) is None:
        return False, f"{engine} is not on PATH"
    code, said = _run(list(status_argv), timeout)
    return code == 0 and bool(said), said or f"{engine} exited {code}"


def engine_has_image(engine: str, reference: str, timeout: float = 20) -> bool:
    code, _ = _run([engine, "image", "inspect", "--format", "{{.Id}}", reference], timeout)
    return code == 0
