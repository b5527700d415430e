"""Results bundles through the library: the format, deterministic export, verification with real ssh-keygen
signatures, the import policy, tampering of every kind, limits, and one transaction per import."""
from __future__ import annotations

import gzip
import hashlib
import json
import re
import sqlite3
import subprocess
import tarfile
from pathlib import Path

import pytest
from bundle_data import allowed_signers, filled_store, make_key, members, rebuild, regular

from dlrun.errors import DlrunError, UsageError
from dlrun.results.exchange.bundle import FORMAT_VERSION, BundleError
from dlrun.results.exchange.bundle_import import import_bundle
from dlrun.results.exchange.bundle_sign import sign
from dlrun.results.limits import Limits
from dlrun.results.exchange.export import export_bundle
from dlrun.results.store.query import Filters
from dlrun.results.store import Store


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("keys")
    alice, mallory = make_key(root, "alice"), make_key(root, "mallory")
    return {"alice": alice, "mallory": mallory,
            "allowed": allowed_signers(root / "allowed_signers", {"alice@site-a.example.org": alice})}


@pytest.fixture
def site_a(tmp_path):
    return filled_store(tmp_path / "a")


def _export(store: Store, out: Path, *, key: Path | None = None, logs: bool = True) -> Path:
    export_bundle(store, Filters(), out, site="site-a", dlrun_version="0.1.0", with_logs=logs,
                  sign=(lambda manifest: sign(manifest, key)) if key else None)
    return out


def _import(home: Path, bundle: Path, **policy):
    return import_bundle(Store(home / "results.sqlite"), bundle, home, **policy)


def _stored(home: Path) -> int:
    path = home / "results.sqlite"
    return sqlite3.connect(path).execute("SELECT count(*) FROM runs").fetchone()[0] if path.exists() else 0


def test_the_same_runs_export_to_the_same_bytes_in_the_documented_layout(site_a, tmp_path, keys):
    first = _export(site_a, tmp_path / "one.bundle", key=keys["alice"])
    second = _export(site_a, tmp_path / "two.bundle", key=keys["alice"])
    assert first.read_bytes() == second.read_bytes()
    listed = members(first)
    names = [info.name for info, _ in listed]
    assert names[:3] == ["manifest.json", "manifest.json.sig", "runs.jsonl"]
    assert names[3:] == sorted(names[3:]) and all(name.startswith("logs/") for name in names[3:])
    assert {info.mtime for info, _ in listed} == {listed[0][0].mtime} and {info.uid for info, _ in listed} == {0}
    manifest = json.loads(listed[0][1])
    assert (manifest["format"], manifest["format_version"], manifest["site"], manifest["runs"]) == \
        ("dlrun-results-bundle", FORMAT_VERSION, "site-a", 3)
    for info, data in listed[2:]:  # every other member is listed with its hash and size
        assert manifest["files"][info.name] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert set(manifest["files"]) == set(names[2:])
    stored = {run["id"]: site_a.get_run(run["id"]) for run in site_a.list_runs(None)}
    for line in listed[2][1].splitlines():  # every stored field travels unchanged
        record = json.loads(line)
        assert {k: v for k, v in record.items() if k != "inventory"} == stored[record["id"]]


def test_a_signed_bundle_imports_once_keeping_where_it_came_from(site_a, tmp_path, keys):
    bundle = _export(site_a, tmp_path / "a.bundle", key=keys["alice"])
    home = tmp_path / "b"
    done = _import(home, bundle, allowed_signers=keys["allowed"])
    assert (done.site, done.signer, len(done.added), done.skipped) == ("site-a", "alice@site-a.example.org", 3, [])
    store = Store(home / "results.sqlite")
    for run_id in done.added:
        original, imported = site_a.get_run(run_id), store.get_run(run_id)
        assert (imported["origin"], imported["site"]) == ("bundle", "site-a")
        assert imported["key"] == original["key"] and imported["key_hash"] == original["key_hash"]
        assert imported["results"] == original["results"] and imported["plan"] == original["plan"]
        assert imported["provenance"]["bundle"] == {
            "sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(), "site": "site-a",
            "signer": "alice@site-a.example.org", "verified": True, "signed": True, "dlrun_version": "0.1.0",
            "imported_at": imported["provenance"]["bundle"]["imported_at"], "origin": "import-log",
            "run_dir": original["run_dir"]}
        assert imported["provenance"]["log_sha256"] == original["provenance"]["log_sha256"]
    [with_dir] = [run for run in (store.get_run(i) for i in done.added) if run["run_dir"]]
    run_dir = Path(with_dir["run_dir"])
    assert run_dir == home / "imported" / "site-a" / with_dir["id"]
    source = Path(site_a.get_run(with_dir["id"])["run_dir"])
    assert (run_dir / "logs/rank.0/stdout").read_bytes() == (source / "logs/rank.0/stdout").read_bytes()
    assert sorted(p.name for p in (home / "imported").iterdir()) == ["site-a"]  # no staging left behind

    again = _import(home, bundle, allowed_signers=keys["allowed"])
    assert again.added == [] and sorted(again.skipped) == sorted(done.added) and _stored(home) == 3


def test_a_bundle_signed_by_a_key_the_site_does_not_allow_is_refused(site_a, tmp_path, keys):
    bundle = _export(site_a, tmp_path / "m.bundle", key=keys["mallory"])
    fingerprint = ssh_fingerprint(keys["mallory"])
    with pytest.raises(BundleError, match=f"signed by ED25519 key {re.escape(fingerprint)}, which is not an allowed "
                                          "signer in") as exc:
        _import(tmp_path / "b", bundle, allowed_signers=keys["allowed"])
    assert exc.value.exit_code == 1 and _stored(tmp_path / "b") == 0


def ssh_fingerprint(key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def _flip_runs(items):
    """One digit of a result's value changed: the record stays valid, only its hash tells."""
    def flip(data: bytes) -> bytes:
        at = data.index(b'"value":') + len(b'"value":')
        return data[:at] + (b"8" if data[at:at + 1] == b"9" else b"9") + data[at + 1:]
    return [(info, flip(data) if info.name == "runs.jsonl" else data) for info, data in items]


def _forge_manifest(items):
    """runs.jsonl changed, and the manifest changed to match it: the old signature no longer covers it."""
    items = _flip_runs(items)
    runs = dict((info.name, data) for info, data in items)["runs.jsonl"]
    out = []
    for info, data in items:
        if info.name == "manifest.json":
            manifest = json.loads(data)
            manifest["files"]["runs.jsonl"] = {"sha256": hashlib.sha256(runs).hexdigest(), "size": len(runs)}
            data = json.dumps(manifest, sort_keys=True, indent=1).encode() + b"\n"
        out.append((info, data))
    return out


def _symlink(items):
    link = tarfile.TarInfo("logs/x/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return [*items, (link, b"")]


@pytest.mark.parametrize("change, message", [
    (_flip_runs, r"member 'runs.jsonl' does not match its sha256 in the manifest \(damaged or tampered\)"),
    (_forge_manifest, r"the signature of alice@site-a.example.org does not match manifest.json"),
    (lambda items: [*items, regular("logs/extra/notes.txt", b"hello")],
     r"member 'logs/extra/notes.txt' is not listed in the manifest"),
    (lambda items: [*items, regular("../../escape", b"x")], r"member '../../escape' is not listed in the manifest"),
    (lambda items: [item for item in items if item[0].name != "runs.jsonl"],
     r"member 'runs.jsonl' listed in the manifest is missing"),
    (lambda items: [items[1], items[0], *items[2:]], r"the first member is 'manifest.json.sig', not manifest.json"),
    (_symlink, r"member 'logs/x/evil' is not a regular file"),
    (lambda items: [*items, items[2]], r"member 'runs.jsonl' appears twice"),
], ids=["byte-in-runs", "replaced-manifest", "added-member", "traversal", "missing-member", "order", "symlink",
        "duplicate"])
def test_a_tampered_bundle_is_refused_in_one_line_and_adds_nothing(site_a, tmp_path, keys, change, message):
    good = _export(site_a, tmp_path / "good.bundle", key=keys["alice"])
    bad = rebuild(good, tmp_path / "bad.bundle", change)
    with pytest.raises(BundleError, match=message) as exc:
        _import(tmp_path / "b", bad, allowed_signers=keys["allowed"])
    assert exc.value.exit_code == 1 and "\n" not in str(exc.value)
    assert _stored(tmp_path / "b") == 0
    assert [p.name for p in (tmp_path / "b" / "imported").iterdir()] == []  # staging gone, nothing placed


def test_damaged_compression_and_trailing_data_are_refused(site_a, tmp_path):
    data = bytearray(_export(site_a, tmp_path / "x.bundle").read_bytes())
    flipped = tmp_path / "flipped.bundle"
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="damaged|does not match|truncated|not a tar"):
        _import(tmp_path / "b", flipped, unsigned=True)
    trailing = tmp_path / "trailing.bundle"
    trailing.write_bytes((tmp_path / "x.bundle").read_bytes() + b"more")
    with pytest.raises(BundleError, match="data after the end of the compressed archive"):
        _import(tmp_path / "b", trailing, unsigned=True)
    inside = tmp_path / "inside.bundle"  # more tar data hidden after the archive's end, within the gzip stream
    inside.write_bytes(gzip.compress(gzip.decompress((tmp_path / "x.bundle").read_bytes()) + b"\0" * 512 + b"rm -rf",
                                     mtime=0))
    with pytest.raises(BundleError, match="data after the end of the archive"):
        _import(tmp_path / "b", inside, unsigned=True)
    assert _stored(tmp_path / "b") == 0


def test_an_unknown_format_version_is_refused_as_bad_input(site_a, tmp_path):
    good = _export(site_a, tmp_path / "x.bundle")

    def version_3(items):
        manifest = json.loads(items[0][1])
        manifest["format_version"] = 3
        return [(items[0][0], json.dumps(manifest).encode()), *items[1:]]
    with pytest.raises(BundleError, match=r"bundle format version 3 is not one this dlrun reads \(valid: 1, 2\); "
                                          "upgrade dlrun") as exc:
        _import(tmp_path / "b", rebuild(good, tmp_path / "v3.bundle", version_3), unsigned=True)
    assert exc.value.exit_code == 2


@pytest.mark.parametrize("name", ["logs/../../../etc/cron.d/x", "logs/r1\n/x", "logs/r1/output.log\n"],
                         ids=["outside", "newline-in-run-id", "newline-in-file-name"])
def test_a_manifest_that_names_a_path_outside_the_bundle_is_refused(site_a, tmp_path, name):
    """A path out of the import folder, or a name ending in a newline (which `$` of a Python pattern lets
    through at the end of a match)."""
    good = _export(site_a, tmp_path / "x.bundle")

    def outside(items):
        manifest = json.loads(items[0][1])
        manifest["files"][name] = {"sha256": "0" * 64, "size": 1}
        return [(items[0][0], json.dumps(manifest).encode()), *items[1:]]
    with pytest.raises(BundleError, match=rf"manifest.json lists an unsafe member name {re.escape(repr(name))}"):
        _import(tmp_path / "b", rebuild(good, tmp_path / "o.bundle", outside), unsigned=True)


def test_the_signature_policy(site_a, tmp_path, keys, monkeypatch):
    signed = _export(site_a, tmp_path / "s.bundle", key=keys["alice"])
    unsigned = _export(site_a, tmp_path / "u.bundle")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with pytest.raises(BundleError, match="is not signed; give --unsigned to import it without a signature") as exc:
        _import(tmp_path / "b", unsigned)
    assert exc.value.exit_code == 2
    with pytest.raises(BundleError, match="is not signed, and this site accepts only bundles signed by") as exc:
        _import(tmp_path / "b", unsigned, allowed_signers=keys["allowed"])
    assert exc.value.exit_code == 1
    with pytest.raises(BundleError, match="is signed, but no allowed-signers file is known") as exc:
        _import(tmp_path / "b", signed)
    assert exc.value.exit_code == 2
    with pytest.raises(UsageError, match="--unsigned and --allowed-signers exclude each other"):
        _import(tmp_path / "b", signed, allowed_signers=keys["allowed"], unsigned=True)
    assert _stored(tmp_path / "b") == 0

    done = _import(tmp_path / "b", unsigned, unsigned=True)  # the user's explicit choice, recorded as such
    run = Store(tmp_path / "b" / "results.sqlite").get_run(done.added[0])
    assert (run["provenance"]["bundle"]["signer"], run["provenance"]["bundle"]["verified"]) == (None, False)

    # a site that names its allowed signers in config.yaml verifies without the option
    (tmp_path / "config" / "dlrun").mkdir(parents=True)
    (tmp_path / "config" / "dlrun" / "config.yaml").write_text(f"allowed_signers: {keys['allowed']}\n")
    assert _import(tmp_path / "c", signed).signer == "alice@site-a.example.org"
    with pytest.raises(BundleError, match="this site accepts only bundles signed by"):
        _import(tmp_path / "d", unsigned)
    # as the README says: a site that names its allowed signers takes no unsigned bundle, --unsigned or not
    with pytest.raises(BundleError, match=r"is not signed, and this site accepts only bundles signed by .* "
                                          r"\(allowed_signers in config.yaml; --unsigned does not lift it\)") as exc:
        _import(tmp_path / "d", unsigned, unsigned=True)
    assert exc.value.exit_code == 1 and _stored(tmp_path / "d") == 0


def _config(tmp_path: Path, monkeypatch, text: str) -> None:
    (tmp_path / "config" / "dlrun").mkdir(parents=True, exist_ok=True)
    (tmp_path / "config" / "dlrun" / "config.yaml").write_text(text)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_a_signer_speaks_only_for_the_sites_it_is_bound_to(site_a, tmp_path, keys, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "site-b")
    signed = _export(site_a, tmp_path / "s.bundle", key=keys["alice"])
    policy = f"allowed_signers: {keys['allowed']}\nsigner_sites:\n  alice@site-a.example.org: "
    _config(tmp_path, monkeypatch, policy + "[site-c, '*.example.org']\n")
    with pytest.raises(BundleError, match=r"the bundle's manifest claims site 'site-a', but its signer "
                                          r"alice@site-a.example.org may speak only for site-c, \*.example.org "
                                          r"\(signer_sites in config.yaml\); refused") as exc:
        _import(tmp_path / "b", signed)
    assert exc.value.exit_code == 1 and _stored(tmp_path / "b") == 0

    # runs another site made, in a bundle its own signer signed: the manifest is right, the runs are not
    other = filled_store(tmp_path / "z", site="site-z")
    mixed = _export(other, tmp_path / "z.bundle", key=keys["alice"])
    _config(tmp_path, monkeypatch, policy + "[site-a]\n")
    with pytest.raises(BundleError, match=r"run \S+ of bundle .* claims site 'site-z', but its signer "
                                          r"alice@site-a.example.org may speak only for site-a"):
        _import(tmp_path / "b", mixed)
    assert _stored(tmp_path / "b") == 0 and list((tmp_path / "b" / "imported").iterdir()) == []
    assert len(_import(tmp_path / "b", signed).added) == 3  # what it may speak for, it does


def test_no_bundle_may_claim_this_sites_own_name(site_a, tmp_path, keys, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "site-a")
    _config(tmp_path, monkeypatch, f"allowed_signers: {keys['allowed']}\n")
    signed = _export(site_a, tmp_path / "s.bundle", key=keys["alice"])
    with pytest.raises(BundleError, match=r"the bundle's manifest claims site 'site-a', this site's own name; "
                                          r"refused \(runs made here are never imported; to move this site's "
                                          r"store between SQLite and PostgreSQL: dlrun results copy SOURCE\)"):
        _import(tmp_path / "b", signed)
    # a bundle from another site that carries runs this site made: refused for the runs it does not hold,
    # skipped (it made them) where it holds them
    export_bundle(site_a, Filters(), tmp_path / "back.bundle", site="site-b", dlrun_version="0.1.0",
                  sign=lambda manifest: sign(manifest, keys["alice"]))
    with pytest.raises(BundleError, match=r"run \S+ of bundle .* claims site 'site-a', this site's own name"):
        _import(tmp_path / "b", tmp_path / "back.bundle")
    assert _stored(tmp_path / "b") == 0
    again = _import(tmp_path / "a", tmp_path / "back.bundle")  # site A's own home holds all three
    assert (again.added, len(again.skipped)) == ([], 3)


def test_an_import_that_fails_in_the_store_leaves_nothing(site_a, tmp_path):
    bundle = _export(site_a, tmp_path / "x.bundle")
    home = tmp_path / "b"
    store = Store(home / "results.sqlite")
    last = max(run["id"] for run in site_a.list_runs(None))
    with store.connect() as conn:  # a real SQLite refusal of the last run, after the others were inserted
        conn.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON runs WHEN NEW.id = '{last}' "
                     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    with pytest.raises(DlrunError, match=r"refused the import \(refused by the test\); nothing was added"):
        _import(home, bundle, unsigned=True)
    assert _stored(home) == 0 and list((home / "imported").iterdir()) == []


def test_a_bundle_larger_than_the_limits_is_refused_before_it_is_unpacked(site_a, tmp_path):
    bundle = _export(site_a, tmp_path / "x.bundle")
    with pytest.raises(BundleError, match=r"more than 20,000 bytes uncompressed \(limits.bundle_bytes\); refused"):
        _import(tmp_path / "b", bundle, unsigned=True, limits=Limits(bundle_bytes=20_000))
    with pytest.raises(BundleError, match=r"member 'runs.jsonl' is [\d,]+ bytes, more than a bundle carries "
                                          r"\(100 bytes, limits.runs_bytes\)"):
        _import(tmp_path / "b", bundle, unsigned=True, limits=Limits(runs_bytes=100))
    assert _stored(tmp_path / "b") == 0


def test_a_site_without_a_name_cannot_export_a_bundle(site_a, tmp_path):
    with pytest.raises(UsageError, match="this site has no name"):
        export_bundle(site_a, Filters(), tmp_path / "x.bundle", site="local", dlrun_version="0.1.0")
    assert not (tmp_path / "x.bundle").exists()


def test_results_show_of_an_imported_run_says_who_signed_it(tmp_path):
    """The sample bundle (real runs, a real signature): `results show` says the site and signer it came
    from and whether the signature was checked, as `--json`'s provenance.bundle does."""
    from conftest import REPO, run_cli

    samples = REPO / "samples"
    for name, policy, said in (
            ("verified", ["--allowed-signers", str(samples / "allowed_signers")],
             "signed by sample-data@dlrun, verified against the allowed signers"),
            ("unverified", ["--unsigned"], "signed, but not verified (no allowed-signers file was given)")):
        env = {"DLRUN_HOME": str(tmp_path / name), "XDG_CONFIG_HOME": str(tmp_path / name / "config")}
        run_cli("results", "import", str(samples / "sample-localhost.bundle"), *policy, env=env, check=True)
        [run] = json.loads(run_cli("results", "list", "--limit", "1", "--json", env=env, check=True).stdout)
        shown = " ".join(run_cli("results", "show", run["id"], env=env, check=True).stdout.replace("│", " ").split())
        assert "imported from a bundle of site sample-data.invalid" in shown and said in shown, shown
