#!/usr/bin/env bash
# Builds upstream Cluster API's core manager (the `core` main package of the
# sigs.k8s.io/cluster-api module named in go.mod) into a cache outside the repo, the same
# way hack/controlplane/build.sh builds the control plane, and prints the binary's path.
# Built once per version, then reused. Called by bench/bench_machinepool.py --upstream.
#
#   bench/upstream/build.sh    -> prints e.g. ~/.cache/machinepool/upstream/v1.14.2/capi-manager
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "sigs.k8s.io/cluster-api" {print $2; exit}' "$here/go.mod")"
cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/upstream/$version"
bin="$cache/capi-manager"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

command -v go >/dev/null 2>&1 || { echo "error: no Go toolchain on PATH (Go >= 1.26 needed)" >&2; exit 1; }
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building upstream Cluster API core manager $version into $cache (a cold build takes minutes)" >&2
start=$SECONDS
cd "$here"
CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$tmp/capi-manager" sigs.k8s.io/cluster-api/core \
  || { echo "error: go build of sigs.k8s.io/cluster-api/core $version failed" >&2; exit 1; }
mv "$tmp/capi-manager" "$bin"
echo "built capi-manager in $((SECONDS - start))s" >&2
echo "$bin"
