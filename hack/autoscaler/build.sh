#!/usr/bin/env bash
# Builds the upstream cluster-autoscaler, with only the clusterapi cloud provider compiled in
# (-tags clusterapi), from Go modules into a cache outside the repo, and prints the binary's path.
# Built once per release, then reused. Called by tests/e2e/autoscaler (and by hand).
#
#   hack/autoscaler/build.sh     -> prints e.g. ~/.cache/machinepool/autoscaler/1.34.0/cluster-autoscaler
#
# CLUSTER_AUTOSCALER=/path/to/cluster-autoscaler uses that binary instead of building (it must
# have the clusterapi provider compiled in).
#
# cluster-autoscaler has no semver module tags: its releases are tags named
# cluster-autoscaler-<release>. The first run resolves that tag to pseudo-versions through the
# module proxy and records them in go.mod/go.sum (commit both); later runs build from the pins.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
release="$(sed -n 's|^// cluster-autoscaler release: *||p' "$here/go.mod")"
module=k8s.io/autoscaler/cluster-autoscaler
apis=k8s.io/autoscaler/cluster-autoscaler/apis

fail() {
  cat >&2 <<MSG
error: $1
cluster-autoscaler $release is built from the Go module $module (Go >= 1.24 and a Go module
proxy that serves it). To use a binary you already have instead (built with -tags clusterapi):
    export CLUSTER_AUTOSCALER=/path/to/cluster-autoscaler
MSG
  exit 1
}

if [ -n "${CLUSTER_AUTOSCALER:-}" ]; then
  [ -x "$CLUSTER_AUTOSCALER" ] || fail "CLUSTER_AUTOSCALER=$CLUSTER_AUTOSCALER is not an executable file"
  echo "$CLUSTER_AUTOSCALER"
  exit 0
fi
[ -n "$release" ] || fail "hack/autoscaler/go.mod names no '// cluster-autoscaler release:'"

cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/autoscaler/$release"
if [ -x "$cache/cluster-autoscaler" ]; then echo "$cache/cluster-autoscaler"; exit 0; fi
command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"
cd "$here"

# The version the proxy gives for a query such as cluster-autoscaler-1.34.0 (a pseudo-version).
resolve() {
  local out
  out="$(go list -m -json "$1@cluster-autoscaler-$release" 2>&1)" \
    || fail "the module proxy would not resolve $1@cluster-autoscaler-$release: $out"
  sed -n 's/^[[:space:]]*"Version": "\(.*\)",*$/\1/p' <<<"$out" | head -n1
}

if ! grep -q "^tool $module\$" go.mod; then
  echo "pinning cluster-autoscaler $release in hack/autoscaler/go.mod (commit go.mod and go.sum)" >&2
  ca_version="$(resolve "$module")"
  apis_version="$(resolve "$apis")"
  # cluster-autoscaler's go.mod points its apis module at a local folder, which Go ignores for a
  # dependency: the same release's apis module has to be named here.
  go mod edit -replace "$apis=$apis@$apis_version"
  go get -tool "$module@$ca_version" || fail "go get -tool $module@$ca_version failed"
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building cluster-autoscaler $release (clusterapi provider) into $cache (a cold build takes a while)" >&2
start=$SECONDS
CGO_ENABLED=0 go build -tags clusterapi -trimpath -ldflags "-s -w" -o "$tmp/cluster-autoscaler" "$module" \
  || fail "go build -tags clusterapi $module failed"
mv "$tmp/cluster-autoscaler" "$cache/cluster-autoscaler"
echo "built cluster-autoscaler in $((SECONDS - start))s" >&2
echo "$cache/cluster-autoscaler"
