"""Importing a results bundle: the signature policy, the checked run records, and one store transaction.

Policy (what a careful site accepts):
  - Every member is checked against the manifest's sha256 and size, always (dlrun.results.bundle_read).
  - A signed bundle is verified against an allowed-signers file: `--allowed-signers FILE`, else
    `allowed_signers: PATH` in dlrun's config.yaml (relative to its directory). The signer must be named in
    that file for the namespace `dlrun-bundle`; the imported runs record who it was.
  - A bundle without a signature is refused when the site names allowed signers, and otherwise imported only
    with an explicit `--unsigned`; so is a signed bundle when no allowed-signers file is known. Runs imported
    that way record that nobody vouched for them (`signer: null`, `verified: false`).
  - `--unsigned` with `--allowed-signers` on one command line is a contradiction: refused.
Exit codes: 1 when the bundle fails a check (damaged, tampered, not signed when signatures are required,
signed by a key that is not allowed); 2 when the command was wrong (no such file, options, a format
version this dlrun does not read, no policy chosen for an unsigned bundle).

Imported runs keep their id, record and key; they are stored with `origin: bundle`, the site they ran at
(the exporting site for runs that named none), and `provenance.bundle` (the bundle's sha256, exporting site,
signer, when imported, and the run's original origin and run directory). Runs whose id is stored already
are skipped, so importing a bundle twice adds nothing. Run-directory files land in
`$DLRUN_HOME/imported/SITE/RUN-ID/`, never elsewhere; all runs go into the store in one transaction.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlrun.config import config_path
from dlrun.errors import DlrunError, UsageError
from dlrun.results.bundle import RUN_ID, BundleError
from dlrun.results.bundle_read import Manifest, ReadBundle, read_bundle
from dlrun.results.bundle_sign import verify
from dlrun.results.fingerprint import checked
from dlrun.results.key import key_from_run
from dlrun.results.schema import recovered_fingerprint
from dlrun.results.query import STATUSES, Filters
from dlrun.results.site import DEFAULT_SITE, SITE_PATTERN
from dlrun.results.store import ORIGINS, Store

IMPORTED_DIR = "imported"


class ResultRow(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    metric: str = Field(min_length=1, max_length=200)
    value: float
    unit: str = Field(max_length=200)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class BundleRun(BaseModel):
    """One line of runs.jsonl: the store's columns, key, plan, provenance, result rows, node inventory."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str = Field(pattern=RUN_ID.pattern)
    created_at: str = Field(max_length=64)
    finished_at: str | None = Field(default=None, max_length=64)
    status: Literal[STATUSES]  # type: ignore[valid-type]
    workload: str | None = None
    model: str | None = None
    image: str | None = None
    image_digest: str | None = None
    system: str | None = None
    scheduler: str | None = None
    launcher: str | None = None
    runtime: str | None = None
    fabric: str | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None
    world_size: int | None = None
    batch_size: int | None = None
    precision: str | None = None
    run_dir: str | None = None
    site: str | None = Field(default=None, pattern=SITE_PATTERN.pattern)
    origin: Literal[ORIGINS] = "local"  # type: ignore[valid-type]
    experiment: str | None = None
    point: str | None = None
    key_hash: str | None = None
    key: dict[str, Any] | None = None
    plan: dict[str, Any]
    provenance: dict[str, Any]
    results: list[ResultRow]
    inventory: dict[str, Any] | None = None
    # format version 2: the machine and the quality verdict (checked again when stored: dlrun.results.store)
    fingerprint: dict[str, Any] | None = None
    quality: dict[str, Any] | None = None
    verdict: str | None = Field(default=None, max_length=20)


@dataclass(frozen=True)
class Imported:
    site: str
    sha256: str
    signer: str | None
    added: list[str]
    skipped: list[str]
    runs: int


def site_allowed_signers() -> Path | None:
    """`allowed_signers:` of dlrun's config.yaml, relative to that file's directory; None when not set."""
    return config_path("allowed_signers")


def signature_policy(allowed_signers: Path | None, unsigned: bool, *, from_config: bool = False):
    """check_signature for read_bundle: the principal that signed the manifest, or None for an accepted
    unsigned import; refuses what the module notes say is refused."""
    if unsigned and allowed_signers is not None and not from_config:
        raise UsageError("--unsigned and --allowed-signers exclude each other: verify the signature, or import "
                         "without checking it")

    def check(manifest: Manifest, manifest_bytes: bytes, signature: bytes | None) -> str | None:
        label = f"bundle from site {manifest.site!r}"
        if signature is not None and allowed_signers is not None and not unsigned:
            return verify(manifest_bytes, signature, allowed_signers, label)
        if unsigned:
            return None
        if signature is None and allowed_signers is not None:
            raise BundleError(f"{label} is not signed, and this site accepts only bundles signed by "
                              f"{str(allowed_signers)!r}; give --unsigned to import it without a signature")
        if signature is None:
            raise BundleError(f"{label} is not signed; give --unsigned to import it without a signature "
                              "(or ask its site to export with --sign KEY)", exit_code=2)
        raise BundleError(f"{label} is signed, but no allowed-signers file is known to check it against; give "
                          "--allowed-signers FILE (or allowed_signers: in config.yaml), or --unsigned to "
                          "import it unverified", exit_code=2)
    return check


def parse_runs(bundle: ReadBundle) -> list[dict[str, Any]]:
    """The records of runs.jsonl, each checked against BundleRun and kept as read (numbers stay exact)."""
    runs: list[dict[str, Any]] = []
    ids: set[str] = set()
    for number, line in enumerate(bundle.runs_bytes.splitlines(), 1):
        try:
            raw = json.loads(line)
            BundleRun.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise BundleError(f"runs.jsonl line {number}: field {where}: {first['msg']}") from None
        except (ValueError, RecursionError):
            raise BundleError(f"runs.jsonl line {number} is not JSON") from None
        if raw["id"] in ids:
            raise BundleError(f"runs.jsonl line {number}: run {raw['id']} appears twice")
        metrics = [row["metric"] for row in raw["results"]]
        if len(set(metrics)) != len(metrics):
            raise BundleError(f"runs.jsonl line {number}: run {raw['id']} has a metric twice")
        ids.add(raw["id"])
        runs.append(raw)
    if len(runs) != bundle.manifest.runs:
        raise BundleError(f"runs.jsonl holds {len(runs)} runs; the manifest says {bundle.manifest.runs}")
    strays = sorted(set(bundle.logs) - ids)
    if strays:
        raise BundleError(f"logs/{strays[0]}/ belongs to no run in runs.jsonl")
    return runs


def _record(raw: dict[str, Any], bundle: ReadBundle, site: str, run_dir: Path | None,
            now: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = dict(raw)
    rows = data.pop("results")
    inventory = data.pop("inventory", None)
    exported_key = data.pop("key", None)
    data.pop("key_hash", None)
    original_origin = data.get("origin") or "local"
    # The key is this dlrun's own reading of the record (as for runs made here), from the run's first origin.
    if data.get("fingerprint") is None and isinstance(inventory, dict):
        data["fingerprint"] = recovered_fingerprint({**data, "origin": original_origin, "run_dir": None}, rows,
                                                    inventory)  # a version-1 bundle: its run's node inventory
    data["fingerprint"] = checked(data.get("fingerprint"))
    key = key_from_run({**data, "origin": original_origin, "site": site}, rows)
    provenance = dict(data["provenance"])
    if inventory is not None:
        provenance.setdefault("inventory", inventory)
    provenance["bundle"] = {
        "sha256": bundle.sha256, "site": bundle.manifest.site, "signer": bundle.signer,
        "verified": bundle.signer is not None, "signed": bundle.signature is not None,
        "dlrun_version": bundle.manifest.dlrun_version, "imported_at": now, "origin": original_origin,
        "run_dir": data.get("run_dir"),
        **({"key_as_exported": exported_key} if exported_key not in (None, key) else {}),
        **({"previous": provenance["bundle"]} if isinstance(provenance.get("bundle"), dict) else {}),
    }
    return {**data, "origin": "bundle", "site": site, "key": key, "provenance": provenance,
            "run_dir": str(run_dir) if run_dir is not None else None}, rows


def import_bundle(store: Store, path: Path, home: Path, *, allowed_signers: Path | None = None,
                  unsigned: bool = False, now: float | None = None) -> Imported:
    """Verify the bundle at `path` and add the runs this store lacks, in one transaction (see module notes)."""
    from_config = False
    if allowed_signers is None:
        allowed_signers = site_allowed_signers()
        from_config = allowed_signers is not None
    check = signature_policy(allowed_signers, unsigned, from_config=from_config)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    imported = home / IMPORTED_DIR
    imported.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = imported / f".staging-{secrets.token_hex(6)}"
    staging.mkdir(mode=0o700)
    placed: list[Path] = []
    try:
        bundle = read_bundle(path, staging=staging, check_signature=check)
        runs = parse_runs(bundle)
        stored = _stored_ids(store, [run["id"] for run in runs])
        pairs = []
        for run in runs:
            site = run["site"] if run.get("site") not in (None, DEFAULT_SITE) else bundle.manifest.site
            run_dir = imported / site / run["id"] if run["id"] in bundle.logs else None
            if run_dir is not None and run["id"] not in stored:
                run_dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                if run_dir.exists():  # left by an import that failed after placing it
                    shutil.rmtree(run_dir)
                os.rename(staging / run["id"], run_dir)
                placed.append(run_dir)
            pairs.append(_record(run, bundle, site, run_dir, stamp))
        try:
            added = store.add_runs(pairs, skip_existing=True)
        except sqlite3.Error as exc:
            raise DlrunError(f"the result store {str(store.path)!r} refused the import ({exc}); nothing was "
                             "added") from None
    except BaseException:
        for run_dir in placed:
            shutil.rmtree(run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                run_dir.parent.rmdir()  # the site's folder, when this import made it
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fresh = set(added)
    skipped = [run["id"] for run in runs if run["id"] not in fresh]
    return Imported(bundle.manifest.site, bundle.sha256, bundle.signer, added, skipped, len(runs))


def _stored_ids(store: Store, ids: list[str], chunk: int = 10_000) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), chunk):
        found |= {run["id"] for run in store.list_runs(None, Filters(run_ids=tuple(ids[start:start + chunk])))}
    return found
