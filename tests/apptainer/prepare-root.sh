#!/bin/bash
# Make the Debian sid root that tests/apptainer/apptainer runs the real Apptainer from (Debian sid's
# apptainer needs glibc >= 2.38; Debian 12 has 2.36): `prepare-root.sh ROOT`. Once: a root that is ready
# (ROOT/.dlrun-ready, which holds the Apptainer version) is kept; one preparation at a time (ROOT.lock).
#   debootstrap --variant=minbase sid, the host's resolv.conf and hosts, then apt-get install apptainer,
#   squashfuse (Apptainer mounts a SIF with squashfuse_ll instead of unpacking it to a temporary sandbox
#   at every exec) and fuse3 (its fusermount3).
# sid's Release file is valid for a week only, and build machines' clocks have run ahead of the mirror's:
# apt is told not to refuse a Release file past its Valid-Until (the packages are still checked against it).
set -euo pipefail
root=${1:?usage: prepare-root.sh ROOT}
mirror=${DLRUN_TEST_SID_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$(dirname "$root")"
exec 9> "$root.lock"
flock 9
if [ -f "$root/.dlrun-ready" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "prepare-root.sh: debootstrap needs root" >&2
    exit 1
fi
for tool in debootstrap unshare pivot_root; do
    command -v "$tool" >/dev/null || { echo "prepare-root.sh: $tool is missing (apt-get install debootstrap util-linux)" >&2; exit 1; }
done
tmp=$root.tmp
rm -rf "$tmp"
started=$(date +%s)
debootstrap --variant=minbase sid "$tmp" "$mirror" > "$root.debootstrap.log" 2>&1 \
    || { tail -5 "$root.debootstrap.log" >&2; exit 1; }
bootstrapped=$(date +%s)
cp /etc/resolv.conf "$tmp/etc/resolv.conf"
cp /etc/hosts "$tmp/etc/hosts"
chroot "$tmp" /bin/sh -c 'apt-get -q -o Acquire::Check-Valid-Until=false update &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends apptainer squashfuse fuse3 &&
    apt-get clean' > "$root.apt.log" 2>&1 || { tail -5 "$root.apt.log" >&2; exit 1; }
version=$(chroot "$tmp" apptainer --version)
rm -rf "$tmp/var/lib/apt/lists/"*
rm -rf "$root"
mv "$tmp" "$root"
printf '%s\ndebootstrap_s=%s\napt_s=%s\n' "$version" "$((bootstrapped - started))" "$(($(date +%s) - bootstrapped))" \
    > "$root/.dlrun-ready"
