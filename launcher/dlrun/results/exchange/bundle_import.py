"""Importing a results bundle: the signature policy, the sites a signer may speak for, the checked run
records, and one store transaction.

Policy (what a careful site accepts):
  - Every member is checked against the manifest's sha256 and size, always (dlrun.results.exchange.bundle_read), and
    nothing beyond the site's limits is read (dlrun.results.limits).
  - A signed bundle is verified against an allowed-signers file: `--allowed-signers FILE`, else
    `allowed_signers: PATH` in dlrun's config.yaml (relative to its directory). The signer must be named in
    that file for the namespace `dlrun-bundle`; the imported runs record who it was. The signature is
    checked over the manifest's bytes before anything in the bundle is parsed.
  - When config.yaml names allowed signers, every bundle must be signed by one of them: an unsigned bundle
    is refused, with or without `--unsigned`. `--allowed-signers FILE` on the command line refuses unsigned
    bundles too. Otherwise a bundle without a signature is imported only with an explicit `--unsigned`;
    so is a signed bundle when no allowed-signers file is known. Runs imported that way record that nobody
    vouched for them (`signer: null`, `verified: false`).
  - `signer_sites:` in config.yaml binds a signer to the sites it may speak for (`PRINCIPAL: [SITE, ...]`,
    shell patterns such as `*.example.org` allowed): a bundle from that signer whose manifest or runs name
    another site is refused. A signer without an entry may speak for any site but this one.
  - No bundle may claim this site's own name (its manifest, or a run this site does not hold): runs made
    here are never imported from elsewhere.
  - `--unsigned` with `--allowed-signers` on one command line is a contradiction: refused.
Exit codes: 1 when the bundle fails a check (damaged, tampered, too large, not signed when signatures are
required, signed by a key that is not allowed, naming a site its signer may not speak for); 2 when the
command was wrong (no such file, options, a format version this dlrun does not read, no policy chosen for
an unsigned bundle).

Imported runs keep their id, record and key; they are stored with `origin: bundle`, the site they ran at
(the exporting site for runs that named none), and `provenance.bundle` (the bundle's sha256, exporting site,
signer, when imported, and the run's original origin and run directory). Runs whose id is stored already
are skipped, so importing a bundle twice adds nothing. Run-directory files land in
`$DLRUN_HOME/imported/SITE/RUN-ID/`, never elsewhere; all runs go into the store in one transaction, read
one at a time from the checked copy of runs.jsonl. An import works in `imported/.staging-*`, locked while
it lives; the next import, or any command that opens the store, removes what a killed import left there.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.config import config_file, config_path, site_config
from dlrun.errors import DlrunError, UsageError
from dlrun.results.exchange.bundle import BundleError
from dlrun.results.exchange.bundle_read import Manifest, ReadBundle, read_bundle
from dlrun.results.exchange.bundle_records import spooled_runs
from dlrun.results.exchange.bundle_sign import verify
from dlrun.results.store.import_staging import IMPORTED_DIR, clean_interrupted_imports, import_staging
from dlrun.results.fingerprint import checked
from dlrun.results.key import key_from_run
from dlrun.results.limits import Limits, site_limits
from dlrun.results.store.query import Filters
from dlrun.results.store.schema import recovered_fingerprint
from dlrun.results.site import DEFAULT_SITE, local_site
from dlrun.results.store import Store



def _config() -> tuple[Path, dict[str, Any]]:
    return config_file(), site_config()


def site_allowed_signers() -> Path | None:
    """`allowed_signers:` of dlrun's config.yaml, relative to that file's directory; None when not set."""
    return config_path("allowed_signers")


def site_signer_sites() -> dict[str, tuple[str, ...]]:
    """`signer_sites:` of config.yaml: principal -> the site names (or shell patterns) it may speak for."""
    path, data = _config()
    value = data.get("signer_sites") or {}
    ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, list) and v
                                         and all(isinstance(s, str) and s for s in v) for k, v in value.items())
    if not ok:
        raise UsageError(f"{path}: signer_sites must map each signer to a list of site names, e.g. "
                         "signer_sites: {ci@hpc.example.org: [hpc.example.org]}")
    return {principal: tuple(sites) for principal, sites in value.items()}


@dataclass(frozen=True)
class SignaturePolicy:
    """What read_bundle's checks decide with (see the module notes)."""

    allowed_signers: Path | None = None
    required: bool = False  # config.yaml names allowed signers: --unsigned does not lift it
    unsigned: bool = False
    signer_sites: dict[str, tuple[str, ...]] = field(default_factory=dict)
    own_site: str | None = None

    def check(self, manifest_bytes: bytes, signature: bytes | None, label: str = "bundle") -> str | None:
        """The principal that signed the manifest, or None for an accepted unsigned import."""
        if signature is not None and self.allowed_signers is not None and (self.required or not self.unsigned):
            return verify(manifest_bytes, signature, self.allowed_signers, label)
        if signature is None and self.required:
            raise BundleError(f"{label} is not signed, and this site accepts only bundles signed by "
                              f"{str(self.allowed_signers)!r} (allowed_signers in config.yaml; --unsigned does not "
                              "lift it)")
        if self.unsigned:
            return None
        if signature is None and self.allowed_signers is not None:
            raise BundleError(f"{label} is not signed, and this site accepts only bundles signed by "
                              f"{str(self.allowed_signers)!r}")
        if signature is None:
            raise BundleError(f"{label} is not signed; give --unsigned to import it without a signature "
                              "(or ask its site to export with --sign KEY)", exit_code=2)
        raise BundleError(f"{label} is signed, but no allowed-signers file is known to check it against; give "
                          "--allowed-signers FILE (or allowed_signers: in config.yaml), or --unsigned to "
                          "import it unverified", exit_code=2)

    def check_site(self, signer: str | None, site: str, what: str) -> None:
        """Refuse `site` (named by `what`) when it is this site's own, or one `signer` may not speak for."""
        if self.own_site is not None and site == self.own_site:
            raise BundleError(f"{what} claims site {site!r}, this site's own name; refused (runs made here are "
                              "never imported; to move this site's store between SQLite and PostgreSQL: dlrun "
                              "results copy SOURCE)")
        allowed = self.signer_sites.get(signer) if signer is not None else None
        if allowed is not None and not any(fnmatch.fnmatchcase(site, pattern) for pattern in allowed):
            raise BundleError(f"{what} claims site {site!r}, but its signer {signer} may speak only for "
                              f"{', '.join(allowed)} (signer_sites in config.yaml); refused")

    def admit(self, manifest: Manifest, signer: str | None) -> None:
        self.check_site(signer, manifest.site, "the bundle's manifest")


def signature_policy(allowed_signers: Path | None, unsigned: bool) -> SignaturePolicy:
    """The policy of this site (config.yaml) with the command line's options (see the module notes)."""
    if unsigned and allowed_signers is not None:
        raise UsageError("--unsigned and --allowed-signers exclude each other: verify the signature, or import "
                         "without checking it")
    configured = site_allowed_signers()
    own = local_site()
    return SignaturePolicy(allowed_signers=allowed_signers or configured, required=configured is not None,
                           unsigned=unsigned, signer_sites=site_signer_sites(),
                           own_site=None if own == DEFAULT_SITE else own)


@dataclass(frozen=True)
class Imported:
    site: str
    sha256: str
    signer: str | None
    added: list[str]
    skipped: list[str]
    runs: int


def _record(raw: dict[str, Any], bundle: ReadBundle, site: str, run_dir: Path | None,
            now: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = dict(raw)
    rows = data.pop("results")
    inventory = data.pop("inventory", None)
    exported_key = data.pop("key", None)
    data.pop("key_hash", None)
    original_origin = data.get("origin") or "local"
    if data.get("fingerprint") is None and isinstance(inventory, dict):
        data["fingerprint"] = recovered_fingerprint({**data, "origin": original_origin, "run_dir": None}, rows,
                                                    inventory)  # a version-1 bundle: its run's node inventory
    data["fingerprint"] = checked(data.get("fingerprint"))
    # The key is this dlrun's own reading of the record (as for runs made here), from the run's first origin.
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


def _run_site(site: str | None, bundle: ReadBundle) -> str:
    return site if site not in (None, DEFAULT_SITE) else bundle.manifest.site


def _place(staging: Path, imported: Path, site: str, run_id: str) -> Path:
    """Move a run's files from staging to imported/SITE/RUN-ID (what a failed import left there replaced)."""
    folder = imported / site
    if folder.is_symlink():
        raise DlrunError(f"{str(folder)!r} is a symbolic link; dlrun places imported runs only in folders it "
                         "made: remove it and import again")
    folder.mkdir(mode=0o700, exist_ok=True)
    run_dir = folder / run_id
    if run_dir.is_symlink():
        run_dir.unlink()
    elif run_dir.exists():  # left by an import that failed after placing it
        shutil.rmtree(run_dir)
    os.rename(staging / run_id, run_dir)
    return run_dir


def import_bundle(store: Store, path: Path, home: Path, *, allowed_signers: Path | None = None,
                  unsigned: bool = False, now: float | None = None, limits: Limits | None = None) -> Imported:
    """Verify the bundle at `path` and add the runs this store lacks, in one transaction (see module notes)."""
    policy = signature_policy(allowed_signers, unsigned)
    limits = limits or site_limits()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    imported = home / IMPORTED_DIR
    if imported.is_symlink():
        raise DlrunError(f"{str(imported)!r} is a symbolic link; dlrun places imported runs only in folders it made: "
                         "remove it and import again")
    imported.mkdir(mode=0o700, parents=True, exist_ok=True)
    clean_interrupted_imports(home)
    label = f"bundle {str(path)!r}"
    placed: list[Path] = []
    with import_staging(imported) as staging:
        try:
            bundle = read_bundle(path, staging=staging, limits=limits, admit=policy.admit,
                                 check_signature=lambda data, signature: policy.check(data, signature, label))
            sites = {run_id: _run_site(site, bundle) for run_id, site in bundle.runs.items()}
            stored = _stored_ids(store, list(sites))
            for run_id, site in sites.items():
                if run_id not in stored:  # a run this site holds already is skipped, whoever claims it
                    policy.check_site(bundle.signer, site, f"run {run_id} of {label}")
            run_dirs = {}
            for run_id in bundle.logs:
                if run_id not in stored:
                    run_dirs[run_id] = _place(staging, imported, sites[run_id], run_id)
                    placed.append(run_dirs[run_id])

            def pairs() -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
                for raw in spooled_runs(bundle.runs_path):
                    yield _record(raw, bundle, sites[raw["id"]], run_dirs.get(raw["id"]), stamp)
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
    fresh = set(added)
    skipped = [run_id for run_id in sites if run_id not in fresh]
    return Imported(bundle.manifest.site, bundle.sha256, bundle.signer, added, skipped, len(sites))


def _stored_ids(store: Store, ids: list[str], chunk: int = 10_000) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), chunk):
        found |= {run["id"] for run in store.list_runs(None, Filters(run_ids=tuple(ids[start:start + chunk])))}
    return found
