"""In-container harnesses (per framework an entry file and its sibling files) and facts about their models.

Counting a model's facts needs PyTorch (a second or two to import), so `counted_models` keeps the counts
in `$XDG_CACHE_HOME/dlrun/model-facts.json`, keyed by the digest of the PyTorch harness's files: a changed
harness (its models file included) is counted again.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.paths import HARNESS_DIR, cache_home, harness_files, harness_hashes

CACHE_NAME = "model-facts.json"


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


def _counting_harness(part: str):
    """The PyTorch harness's module that counts a model's facts; a one-line error without torch."""
    try:
        return load_harness("pytorch", part)
    except ImportError as exc:
        raise DlrunError(f"cannot count model facts: {exc}; install the torch extra: pip install -e '.[torch]'")


def describe_model(model: str) -> dict[str, Any]:
    """Parameters and forward multiply-adds per instance, counted on the harness's own definition."""
    models = _counting_harness("models")
    if model not in models.MODEL_NAMES:
        raise unknown_name("model", model, models.MODEL_NAMES)
    return models.describe_model(model)


def describe_llm(model: str, seq_length: int) -> dict[str, Any]:
    """An LLM's parameters and FLOPs per token at `seq_length` (the attention term grows with it), counted on
    the harness's model built on the meta device (no memory for weights)."""
    llama = _counting_harness("llama")
    if model not in llama.LLAMA_NAMES:
        raise unknown_name("LLM model", model, llama.LLAMA_NAMES)
    return llama.describe_llama(model, seq_length)


def _harness_sha256() -> str | None:
    digest, _ = harness_hashes(HARNESS_DIR, "pytorch")
    return f"sha256:{digest}" if digest else None


def _read_cache(path: Path, harness: str | None) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    fresh = isinstance(data, dict) and harness is not None and data.get("harness_sha256") == harness
    models = data.get("models") if fresh else None
    return models if isinstance(models, dict) else {}


def _write_cache(path: Path, harness: str | None, models: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"harness_sha256": harness, "models": models}, indent=1, sort_keys=True))
    os.replace(tmp, path)  # readers see the old file or the new one, never half of one


def counted_models(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """model -> {"forward_macs", "params"} for the models the harness knows, from the cache or counted
    (a name the harness does not know is cached as None, so PyTorch is not imported for it again)."""
    names = set(names)
    path = cache_home() / CACHE_NAME
    harness = _harness_sha256()
    cache = _read_cache(path, harness)
    missing = sorted(n for n in names if n not in cache)
    if missing:
        for name in missing:
            try:
                facts = describe_model(name)
            except UsageError:  # not a model of the harness: remembered
                cache[name] = None
                continue
            except DlrunError:  # no PyTorch here: nothing to remember
                continue
            cache[name] = {"forward_macs": facts["forward_macs"], "params": facts["params"]}
        try:
            _write_cache(path, harness, cache)
        except OSError:
            pass  # a read-only cache only costs the count next time
    return {n: cache[n] for n in names if cache.get(n)}
