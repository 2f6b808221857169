#!/usr/bin/env bash
# Fetches the CRDs of Cluster API Provider AWS (CAPA) from its Go module and prints the folder
# that holds them (one YAML file per CRD: CAPA's config/crd/bases). The module's config/ tree is
# copied once per version into a cache outside the repo, then reused. Called by the tests that
# install CAPA beside our AWS provider (tests/integration/aws/test_aws_beside_capa.py), and by
# hand:
#
#   hack/capa/crds.sh            -> prints e.g. ~/.cache/machinepool/capa/v2.13.0/config/crd/bases
#   kubectl apply --server-side -f "$(hack/capa/crds.sh)"
#   hack/capa/crds.sh --config   -> the config/ folder (kubectl kustomize "$(...)/default"
#                                   renders CAPA's components, as its release file has them)
#
# The module comes from the Go module proxy (`go mod download`; nothing is built).
# CAPA_DIR=/path uses a CAPA source tree or module folder you already have instead;
# CAPA_VERSION picks another release (default v2.13.0).
#
#   hack/capa/crds.sh --check    exit 0 when the folder can be had (CAPA_DIR, the cache, or a
#                                fetch that works now, which fills the cache); prints nothing
set -euo pipefail

version="${CAPA_VERSION:-v2.13.0}"
module="sigs.k8s.io/cluster-api-provider-aws/v2"
cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/capa/$version/config"

fail() {
  cat >&2 <<MSG
error: $1
CAPA's CRDs are fetched from the Go module $module@$version (Go and the Go module proxy).
To use a CAPA source tree or module folder you already have instead:
    export CAPA_DIR=/path/to/cluster-api-provider-aws
MSG
  exit 1
}

# The config/ folder: CAPA_DIR's, the cached copy, or the module's, fetched and copied.
config() {
  if [ -n "${CAPA_DIR:-}" ]; then
    [ -d "$CAPA_DIR/config/crd/bases" ] || fail "CAPA_DIR=$CAPA_DIR has no config/crd/bases"
    echo "$CAPA_DIR/config"
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
  tmp="$(mktemp -d "$(dirname "$cache")/.config.XXXXXX")"
  cp -R "$dir/config/." "$tmp/"
  chmod -R u+w "$tmp"
  touch "$tmp/.complete"
  rm -rf "$cache"
  mv "$tmp" "$cache"
  echo "$cache"
}

case "${1:-}" in
  --check) config >/dev/null 2>&1 ;;
  --config) config ;;
  "") dir="$(config)"; echo "$dir/crd/bases" ;;
  *) echo "usage: $0 [--check | --config]" >&2; exit 2 ;;
esac
