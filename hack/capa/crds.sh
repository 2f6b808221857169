#!/usr/bin/env bash
# Fetches the CRDs of Cluster API Provider AWS (CAPA) from its Go module and prints the folder
# that holds them (one YAML file per CRD, as CAPA's config/crd/bases has them). Copied once per
# version into a cache outside the repo, then reused. Called by the test that installs CAPA
# beside our AWS provider (tests/integration/aws/test_aws_beside_capa.py), and by hand:
#
#   hack/capa/crds.sh            -> prints e.g. ~/.cache/machinepool/capa/v2.13.0/crds
#   kubectl apply --server-side -f "$(hack/capa/crds.sh)"
#
# The module comes from the Go module proxy (`go mod download`, no build). CAPA_CRDS=/folder
# uses a folder you already have instead; CAPA_VERSION picks another release (default v2.13.0).
#
#   hack/capa/crds.sh --check    exit 0 when the folder can be had (CAPA_CRDS, the cache, or a
#                                fetch that works now, which then fills the cache); prints nothing
set -euo pipefail

version="${CAPA_VERSION:-v2.13.0}"
module="sigs.k8s.io/cluster-api-provider-aws/v2"
cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/capa/$version/crds"

fail() {
  cat >&2 <<MSG
error: $1
CAPA's CRDs are fetched from the Go module $module@$version (Go and the Go module proxy).
To use a folder of CAPA's CRDs you already have instead:
    export CAPA_CRDS=/path/to/config/crd/bases
MSG
  exit 1
}

fetch() {
  if [ -n "${CAPA_CRDS:-}" ]; then
    ls "$CAPA_CRDS"/*.yaml >/dev/null 2>&1 || fail "CAPA_CRDS=$CAPA_CRDS holds no *.yaml"
    echo "$CAPA_CRDS"
    return
  fi
  if [ -f "$cache/.complete" ]; then echo "$cache"; return; fi
  command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"
  local dir
  dir="$(GOFLAGS=-mod=mod go mod download -json "$module@$version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" \
    || fail "go mod download $module@$version failed"
  [ -d "$dir/config/crd/bases" ] || fail "$module@$version has no config/crd/bases"
  mkdir -p "$(dirname "$cache")"
  local tmp
  tmp="$(mktemp -d "$(dirname "$cache")/.crds.XXXXXX")"
  cp "$dir"/config/crd/bases/*.yaml "$tmp/"
  chmod -R u+w "$tmp"
  touch "$tmp/.complete"
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "$cache"
}

if [ "${1:-}" = "--check" ]; then
  fetch >/dev/null 2>&1
  exit
fi
fetch
