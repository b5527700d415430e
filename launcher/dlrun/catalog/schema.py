"""The JSON Schema of a system profile, with each scheduler's own `scheduler_options` (`dlrun catalogs schema`)."""
from __future__ import annotations

from typing import Any

from dlrun.catalog.models import SystemSpec
from dlrun.registry import SCHEDULERS


def system_json_schema() -> dict[str, Any]:
    """SystemSpec's JSON Schema, with each scheduler's own options: `scheduler_options` takes what the entry's
    `scheduler` declares (`local`'s where it names none)."""
    document = SystemSpec.model_json_schema()
    defs = document.setdefault("$defs", {})
    default = SystemSpec.model_fields["scheduler"].default
    branches = []
    for name, scheduler in SCHEDULERS.available().items():
        own = scheduler.options.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(own.pop("$defs", {}))
        defs[scheduler.options.__name__] = own
        named = {"properties": {"scheduler": {"const": name}}, "required": ["scheduler"]}
        condition = {"anyOf": [named, {"not": {"required": ["scheduler"]}}]} if name == default else named
        branches.append({"if": condition, "then": {"properties": {
            "scheduler_options": {"$ref": f"#/$defs/{scheduler.options.__name__}"}}}})
    document["allOf"] = branches
    return document
