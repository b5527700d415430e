"""In-container harnesses (one self-contained script per framework) and facts about their models."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def load_harness(framework: str = "pytorch") -> ModuleType:
    """Import a harness script as a module (it is a standalone file, not part of the package API)."""
    path = HARNESS_DIR / f"harness_{framework}.py"
    spec = importlib.util.spec_from_file_location(f"dlrun_harness_{framework}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def describe_model(model: str) -> dict[str, Any]:
    """Parameters and forward multiply-adds per image, counted on the harness's own definition."""
    from dlrun.errors import DlrunError, unknown_name

    try:
        harness = load_harness("pytorch")
    except ImportError as exc:
        raise DlrunError(f"cannot count model facts: {exc}; install the torch extra: pip install -e '.[torch]'")
    if model not in harness.MODEL_NAMES:
        raise unknown_name("model", model, harness.MODEL_NAMES)
    return harness.describe_model(model)
