#!/usr/bin/env bash
# Builds the upstream cluster-autoscaler, with only the clusterapi cloud provider compiled in
# (-tags clusterapi), from a source folder into a cache outside the repo, and prints the binary's
# path. Built once per release, then reused. Called by tests/e2e/autoscaler (and by hand).
#
#   CLUSTER_AUTOSCALER_SRC=/path/to/cluster-autoscaler-1.34.5 hack/autoscaler/build.sh
#       -> prints e.g. ~/.cache/machinepool/autoscaler/1.34.5/cluster-autoscaler
#
# Where the binary comes from, first match wins:
#   CLUSTER_AUTOSCALER=/path/to/cluster-autoscaler   a binary you already have (-tags clusterapi)
#   the cache                                        a binary an earlier run built
#   CLUSTER_AUTOSCALER_SRC=/path/to/source           the `cluster-autoscaler` folder of the
#                                                    kubernetes/autoscaler repository at tag
#                                                    cluster-autoscaler-$RELEASE
# The Go module proxy cannot serve cluster-autoscaler itself (its releases are tags named
# cluster-autoscaler-X.Y.Z, not semver module tags), so the source is a folder; its dependencies
# are ordinary modules and come from the proxy. .ci/run copies the shared third_party copy to a
# folder outside ../shared and names it here.
#
#   hack/autoscaler/build.sh --check   exit 0 when one of the three sources above is present
#                                      (so a binary can be had); prints nothing
set -euo pipefail

RELEASE=1.34.5

fail() {
  cat >&2 <<MSG
error: $1
cluster-autoscaler $RELEASE is built from its source folder (Go >= 1.24; dependencies from the
Go module proxy). Either name the source (the kubernetes/autoscaler repository's
cluster-autoscaler folder at tag cluster-autoscaler-$RELEASE, copied where the build may write):
    export CLUSTER_AUTOSCALER_SRC=/path/to/cluster-autoscaler-$RELEASE
or use a binary you already have (built with -tags clusterapi):
    export CLUSTER_AUTOSCALER=/path/to/cluster-autoscaler
MSG
  exit 1
}

cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/autoscaler/$RELEASE"
src="${CLUSTER_AUTOSCALER_SRC:-}"

if [ "${1:-}" = "--check" ]; then
  [ -n "${CLUSTER_AUTOSCALER:-}" ] || [ -x "$cache/cluster-autoscaler" ] || [ -n "$src" ]
  exit
fi

if [ -n "${CLUSTER_AUTOSCALER:-}" ]; then
  [ -x "$CLUSTER_AUTOSCALER" ] || fail "CLUSTER_AUTOSCALER=$CLUSTER_AUTOSCALER is not an executable file"
  echo "$CLUSTER_AUTOSCALER"
  exit 0
fi
if [ -x "$cache/cluster-autoscaler" ]; then echo "$cache/cluster-autoscaler"; exit 0; fi

[ -n "$src" ] || fail "no cached binary in $cache and CLUSTER_AUTOSCALER_SRC is not set"
[ -f "$src/main.go" ] && [ -f "$src/go.mod" ] \
  || fail "CLUSTER_AUTOSCALER_SRC=$src is not a cluster-autoscaler source folder (no main.go/go.mod)"
found="$(sed -n 's/^const ClusterAutoscalerVersion = "\(.*\)"$/\1/p' "$src/version/version.go" 2>/dev/null || true)"
[ "$found" = "$RELEASE" ] \
  || fail "CLUSTER_AUTOSCALER_SRC=$src is release '${found:-unknown}', the tests pin $RELEASE"
command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building cluster-autoscaler $RELEASE (clusterapi provider) from $src into $cache (a cold build takes minutes)" >&2
start=$SECONDS
(cd "$src" && CGO_ENABLED=0 go build -tags clusterapi -trimpath -ldflags "-s -w" -o "$tmp/cluster-autoscaler" .) \
  || fail "go build -tags clusterapi in $src failed"
mv "$tmp/cluster-autoscaler" "$cache/cluster-autoscaler"
echo "built cluster-autoscaler in $((SECONDS - start))s" >&2
echo "$cache/cluster-autoscaler"
