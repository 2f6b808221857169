#!/usr/bin/env bash
# Builds upstream Cluster API's clusterctl (cmd/clusterctl of the sigs.k8s.io/cluster-api module)
# from Go modules into a cache outside the repo, and prints the binary's path. Built once per
# version, then reused. Called by tests/e2e/clients (and by hand).
#
#   hack/clusterctl/build.sh   -> prints e.g. ~/.cache/machinepool/clusterctl/v1.14.2/clusterctl
#
# The version is the one bench/upstream/go.mod pins for the benchmark (this folder's go.mod must
# pin the same; both modules come from the Go module proxy, so a machine with Go can always build
# it). CLUSTERCTL=/path/to/clusterctl uses that binary instead of building.
#
#   hack/clusterctl/build.sh --check   exit 0 when a binary can be had (CLUSTERCTL, the cache,
#                                      or a Go toolchain to build it); prints nothing
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="$(awk '$1 == "sigs.k8s.io/cluster-api" {print $2; exit}' "$repo/bench/upstream/go.mod")"
cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/clusterctl/$version"

fail() {
  cat >&2 <<MSG
error: $1
clusterctl $version is built from the Go module sigs.k8s.io/cluster-api (Go >= 1.26 and the Go
module proxy). To use a binary you already have instead:
    export CLUSTERCTL=/path/to/clusterctl
MSG
  exit 1
}

if [ "${1:-}" = "--check" ]; then
  [ -n "${CLUSTERCTL:-}" ] || [ -x "$cache/clusterctl" ] || command -v go >/dev/null 2>&1
  exit
fi

if [ -n "${CLUSTERCTL:-}" ]; then
  [ -x "$CLUSTERCTL" ] || fail "CLUSTERCTL=$CLUSTERCTL is not an executable file"
  echo "$CLUSTERCTL"
  exit 0
fi
if [ -x "$cache/clusterctl" ]; then echo "$cache/clusterctl"; exit 0; fi

[ -n "$version" ] || fail "bench/upstream/go.mod pins no sigs.k8s.io/cluster-api"
pinned="$(awk '$1 == "sigs.k8s.io/cluster-api" {print $2; exit}' "$here/go.mod")"
[ "$pinned" = "$version" ] \
  || fail "hack/clusterctl/go.mod pins sigs.k8s.io/cluster-api $pinned, bench/upstream/go.mod $version: run (cd hack/clusterctl && go get sigs.k8s.io/cluster-api@$version sigs.k8s.io/cluster-api/api@$version)"
command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"

major="${version#v}"; major="${major%%.*}"
minor="${version#v*.}"; minor="${minor%%.*}"
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building clusterctl $version into $cache (a cold build takes minutes)" >&2
start=$SECONDS
# The version is stamped so that clusterctl checks provider contracts as the release would
# (an unstamped build calls itself v0.0.0 and nags about upgrades).
(cd "$here" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w \
    -X sigs.k8s.io/cluster-api/version.gitVersion=$version \
    -X sigs.k8s.io/cluster-api/version.gitMajor=$major \
    -X sigs.k8s.io/cluster-api/version.gitMinor=$minor \
    -X sigs.k8s.io/cluster-api/version.gitTreeState=clean" \
    -o "$tmp/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl) \
  || fail "go build of sigs.k8s.io/cluster-api/cmd/clusterctl $version failed"
mv "$tmp/clusterctl" "$cache/clusterctl"
echo "built clusterctl in $((SECONDS - start))s" >&2
echo "$cache/clusterctl"
