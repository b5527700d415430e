"""Signing a bundle's manifest with an SSH key, and checking it against a site's allowed signers, with
OpenSSH's own `ssh-keygen -Y` (every site has it; OpenSSH 8.2 or newer).

    sign:    ssh-keygen -Y sign -f KEY -n dlrun-bundle                  (manifest on stdin, signature out)
    signer:  ssh-keygen -Y find-principals -f ALLOWED_SIGNERS -s SIG    (the principals the key is allowed as)
    verify:  ssh-keygen -Y verify -f ALLOWED_SIGNERS -I SIGNER -n dlrun-bundle -s SIG < manifest

An allowed-signers file (ssh-keygen(1), "ALLOWED SIGNERS") has one line per key:
`PRINCIPAL[,PRINCIPAL...] [namespaces="dlrun-bundle"] KEYTYPE BASE64-KEY [comment]`, e.g.
`ci@hpc.example.org namespaces="dlrun-bundle" ssh-ed25519 AAAAC3Nz...`. The signer recorded with imported
runs is the principal the file names for the key that made the signature.
"""
from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dlrun.results.exchange.bundle import SIGNATURE_NAMESPACE, BundleError

SSH_KEYGEN = "ssh-keygen"
TIMEOUT_S = 60


def _ssh_keygen(args: list[str], *, stdin: bytes | None = None, timeout: float | None = TIMEOUT_S,
                keep_stdin: bool = False) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([SSH_KEYGEN, *args], input=stdin, capture_output=True, timeout=timeout, check=False,
                              stdin=None if keep_stdin or stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise BundleError("ssh-keygen is not installed; install OpenSSH's client (Debian/Ubuntu: openssh-client, "
                          "RHEL: openssh)", exit_code=2) from None
    except subprocess.TimeoutExpired:
        raise BundleError(f"ssh-keygen {args[0]} {args[1]} did not finish in {timeout:.0f} s") from None


def _last_line(data: bytes | None) -> str:
    lines = [line.strip() for line in (data or b"").decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


@contextlib.contextmanager
def _written(name: str, data: bytes) -> Iterator[Path]:
    """`data` in a file called `name` of a private temporary directory, removed after the block."""
    with tempfile.TemporaryDirectory(prefix="dlrun-sig-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        yield path


def sign(manifest: bytes, key: Path) -> bytes:
    """An SSH signature of `manifest` with the private key `key` (or a public key whose private half an
    ssh-agent holds). A key with a passphrase asks for it on the terminal, as ssh-keygen always does: the
    manifest goes in as a file, so that standard input stays the user's."""
    key = Path(key)
    if not key.is_file():
        raise BundleError(f"--sign {str(key)!r}: no such key file; valid: an SSH private key such as "
                          "~/.ssh/id_ed25519 (make one with ssh-keygen -t ed25519)", exit_code=2)
    with _written("manifest.json", manifest) as target:
        proc = _ssh_keygen(["-Y", "sign", "-f", str(key), "-n", SIGNATURE_NAMESPACE, str(target)], timeout=None,
                           keep_stdin=True)
        signature = target.with_name("manifest.json.sig")
        data = signature.read_bytes() if signature.is_file() else b""
    if proc.returncode != 0 or not data.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        raise BundleError(f"ssh-keygen could not sign with {str(key)!r}: {_last_line(proc.stderr)}", exit_code=2)
    return data


def key_fingerprint(manifest: bytes, signature: bytes) -> str:
    """Which key made `signature` ("ED25519 key SHA256:..."), checked against `manifest` but not against
    any allowed signer: for naming an unknown signer in an error."""
    with _written("manifest.json.sig", signature) as sig:
        proc = _ssh_keygen(["-Y", "check-novalidate", "-n", SIGNATURE_NAMESPACE, "-s", str(sig)], stdin=manifest)
    text = (proc.stdout or b"").decode(errors="replace") + (proc.stderr or b"").decode(errors="replace")
    marker = text.find(" key SHA256:")
    if proc.returncode != 0 or marker < 0:
        return "a key that did not sign this manifest"
    kind = text[:marker].split()[-1]
    return f"{kind} key {text[marker + 5:].split()[0]}"


def verify(manifest: bytes, signature: bytes, allowed_signers: Path, label: str) -> str:
    """The principal that signed `manifest`, as `allowed_signers` names it; BundleError (exit 1) when the
    signature is damaged, made over other bytes, or made by a key the file does not allow."""
    allowed_signers = Path(allowed_signers)
    if not allowed_signers.is_file():
        raise BundleError(f"allowed signers file {str(allowed_signers)!r} does not exist; valid: a file of "
                          "`PRINCIPAL namespaces=\"dlrun-bundle\" ssh-ed25519 AAAA...` lines", exit_code=2)
    with _written("manifest.json.sig", signature) as sig:
        found = _ssh_keygen(["-Y", "find-principals", "-f", str(allowed_signers), "-s", str(sig)])
        principals = [line.strip() for line in found.stdout.decode(errors="replace").splitlines() if line.strip()]
        if found.returncode != 0 or not principals:
            if b"couldn't parse signature" in (found.stderr or b"").lower():
                raise BundleError(f"{label}: manifest.json.sig is not a valid SSH signature "
                                  f"({_last_line(found.stderr)})")
            raise BundleError(f"{label}: signed by {key_fingerprint(manifest, signature)}, which is not an "
                              f"allowed signer in {str(allowed_signers)!r}")
        for principal in principals:
            proc = _ssh_keygen(["-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n",
                                SIGNATURE_NAMESPACE, "-s", str(sig)], stdin=manifest)
            if proc.returncode == 0:
                return principal
    raise BundleError(f"{label}: the signature of {', '.join(principals)} does not match manifest.json "
                      f"(tampered, or signed for another purpose): {_last_line(proc.stderr)}")
