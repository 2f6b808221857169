#!/usr/bin/env bash
# Builds what the upstream comparison of bench/bench_machinepool.py needs, from Go modules,
# into a cache outside the repo (built once per version, then reused), and prints its path:
#
#   bench/upstream/build.sh manager       -> ~/.cache/machinepool/upstream/v1.14.2/capi-manager
#       upstream Cluster API's core manager: the `core` main package of the
#       sigs.k8s.io/cluster-api module pinned in go.mod (this folder's wrapper module).
#   bench/upstream/build.sh bootstrap     -> ~/.cache/machinepool/upstream/v1.14.2/capi-kubeadm-bootstrap-manager
#       upstream's kubeadm bootstrap provider manager (its `bootstrap/kubeadm` main package), for
#       the conformance suite's comparison of rendered bootstrap data.
#   bench/upstream/build.sh controlplane  -> ~/.cache/machinepool/upstream/controlplane-v1.34.4
#       a folder with the control-plane binaries of hack/controlplane/build.sh, except that
#       kube-apiserver is re-linked with its version stamped (-X k8s.io/component-base/version.*):
#       an unstamped build reports v0.0.0-master, which upstream's manager refuses to start
#       against ("minimum required version is v1.20.0"). Same sources, same module versions.
#   bench/upstream/build.sh capa          -> ~/.cache/machinepool/upstream/capa-v2.13.0/capa-manager
#       Cluster API Provider AWS's manager (CAPA_VERSION below; its CRDs and webhook
#       configurations come from hack/capa/crds.sh, which fetches CAPA's config/), for the
#       tests that run CAPA's AWSMachinePool under our core against moto. CAPA is its own module
#       built from its own go.mod (`go install module@version`), not a requirement of this
#       folder's wrapper: minimal version selection would otherwise mix CAPA's cluster-api and
#       Kubernetes versions into the graph upstream's core manager is built from.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
root="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/upstream"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
CAPA_MODULE=sigs.k8s.io/cluster-api-provider-aws/v2
CAPA_VERSION=v2.13.0
tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

need_go() {
  command -v go >/dev/null 2>&1 || { echo "error: no Go toolchain on PATH (Go >= 1.26 needed)" >&2; exit 1; }
}

# build_manager NAME PACKAGE: one of upstream's managers, built once per version.
build_manager() {
  local name="$1" package="$2" version cache bin start
  version="$(awk '$1 == "sigs.k8s.io/cluster-api" {print $2; exit}' "$here/go.mod")"
  cache="$root/$version"
  bin="$cache/$name"
  if [ -x "$bin" ]; then echo "$bin"; return; fi
  need_go
  mkdir -p "$cache"
  tmp="$(mktemp -d "$cache/.build.XXXXXX")"
  echo "building upstream $package $version into $cache (a cold build takes minutes)" >&2
  start=$SECONDS
  (cd "$here" && go build -trimpath -ldflags "-s -w" -o "$tmp/$name" "$package") \
    || { echo "error: go build of $package $version failed" >&2; exit 1; }
  mv "$tmp/$name" "$bin"
  echo "built $name in $((SECONDS - start))s" >&2
  echo "$bin"
}

build_controlplane() {
  local cp version major minor dir start b
  cp="$(bash "$repo/hack/controlplane/build.sh")"
  version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$repo/hack/controlplane/go.mod")"
  major="${version#v}"; major="${major%%.*}"
  minor="${version#v*.}"; minor="${minor%%.*}"
  dir="$root/controlplane-$version"
  if [ -x "$dir/kube-apiserver" ]; then echo "$dir"; return; fi
  need_go
  mkdir -p "$dir"
  for b in etcd kube-controller-manager kube-scheduler kubectl; do
    [ -x "$cp/$b" ] && ln -sf "$cp/$b" "$dir/$b"
  done
  tmp="$(mktemp -d "$dir/.build.XXXXXX")"
  echo "re-linking kube-apiserver $version with its version stamped into $dir" >&2
  start=$SECONDS
  (cd "$repo/hack/controlplane" && go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$version \
      -X k8s.io/component-base/version.gitMajor=$major \
      -X k8s.io/component-base/version.gitMinor=$minor" \
      -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver) \
    || { echo "error: go build of kube-apiserver $version failed" >&2; exit 1; }
  mv "$tmp/kube-apiserver" "$dir/kube-apiserver"
  echo "built kube-apiserver in $((SECONDS - start))s" >&2
  echo "$dir"
}

build_capa() {
  # The manager only: CAPA's manifests (CRDs, webhooks) come from hack/capa/crds.sh, the one
  # place they are fetched, which tests/support/capa.py calls.
  local cache="$root/capa-$CAPA_VERSION" bin start
  bin="$cache/capa-manager"
  if [ -x "$bin" ]; then echo "$bin"; return; fi
  need_go
  mkdir -p "$cache"
  tmp="$(mktemp -d "$cache/.build.XXXXXX")"
  echo "building CAPA $CAPA_VERSION into $cache (a cold build takes minutes)" >&2
  start=$SECONDS
  (cd "$tmp" && GOBIN="$tmp/bin" go install -trimpath -ldflags "-s -w" "$CAPA_MODULE@$CAPA_VERSION") \
    || { echo "error: go install of $CAPA_MODULE@$CAPA_VERSION failed" >&2; exit 1; }
  mv "$tmp/bin/cluster-api-provider-aws" "$bin"
  rm -rf "$tmp"
  echo "built CAPA's manager in $((SECONDS - start))s" >&2
  echo "$bin"
}

if [ "${1:-}" = "--check" ]; then
  # exit 0 when target $2 is cached or a Go toolchain can build it; prints nothing
  [ "${2:-}" = capa ] && [ -x "$root/capa-$CAPA_VERSION/capa-manager" ] && exit 0
  command -v go >/dev/null 2>&1
  exit
fi

case "${1:-manager}" in
  manager) build_manager capi-manager sigs.k8s.io/cluster-api/core ;;
  bootstrap) build_manager capi-kubeadm-bootstrap-manager sigs.k8s.io/cluster-api/bootstrap/kubeadm ;;
  controlplane) build_controlplane ;;
  capa) build_capa ;;
  *) echo "usage: $0 [--check] [manager|bootstrap|controlplane|capa]" >&2; exit 2 ;;
esac
