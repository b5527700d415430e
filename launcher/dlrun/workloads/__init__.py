"""In-container harnesses (per framework an entry file and its sibling files) and facts about their models."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from dlrun.errors import DlrunError, unknown_name
from dlrun.paths import HARNESS_DIR, harness_files


def load_harness(framework: str = "pytorch", part: str | None = None) -> ModuleType:
    """Import one harness file as a module: the entry `harness_<framework>.py`, or with `part` its sibling
    `harness_<framework>_<part>.py` (e.g. "models") or the shared `harness_<part>.py` ("common"). The files are standalone scripts, not part of the
    package API; they import each other by these top-level names, as they do in a container, so the harness
    directory goes on sys.path (last: nothing of the launcher's can be shadowed by it)."""
    name = f"harness_{framework}" + (f"_{part}" if part else "")
    known = [path.stem for path in harness_files(framework)]
    if name not in known and f"harness_{part}" in known:
        name = f"harness_{part}"
    if name not in known:
        raise unknown_name("harness file", name, known)
    if str(HARNESS_DIR) not in sys.path:
        sys.path.append(str(HARNESS_DIR))
    return importlib.import_module(name)


def describe_model(model: str) -> dict[str, Any]:
    """Parameters and forward multiply-adds per instance, counted on the harness's own definition."""
    try:
        models = load_harness("pytorch", "models")
    except ImportError as exc:
        raise DlrunError(f"cannot count model facts: {exc}; install the torch extra: pip install -e '.[torch]'")
    if model not in models.MODEL_NAMES:
        raise unknown_name("model", model, models.MODEL_NAMES)
    return models.describe_model(model)
