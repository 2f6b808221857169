#!/usr/bin/env bash
# Builds the local control-plane binaries from Go modules into a cache outside the repo and
# prints the folder that holds them. Built once per version, then reused: a binary already in
# the cache is not built again, so adding one to the list builds only that one.
#
#   hack/controlplane/build.sh            -> prints e.g. ~/.cache/machinepool/controlplane/v1.34.4
#
# When KUBEBUILDER_ASSETS names a folder that already holds the binaries, that folder is
# printed and nothing is built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$here/go.mod")"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kubelet kube-proxy)

has_all() {  # what a KUBEBUILDER_ASSETS folder must hold; the others (kubectl, kube-scheduler,
             # and the real node's kubelet and kube-proxy) are optional
  local dir="$1" b
  for b in kube-apiserver kube-controller-manager etcd; do [ -x "$dir/$b" ] || return 1; done
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  if has_all "$KUBEBUILDER_ASSETS"; then echo "$KUBEBUILDER_ASSETS"; exit 0; fi
  echo "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS does not hold kube-apiserver, kube-controller-manager and etcd; building instead" >&2
fi

cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/controlplane/$version"
missing=()
for b in "${binaries[@]}"; do [ -x "$cache/$b" ] || missing+=("$b"); done
if [ "${#missing[@]}" -eq 0 ]; then echo "$cache"; exit 0; fi

fail() {
  cat >&2 <<MSG
error: $1
The control-plane binaries are built from Go modules (Go >= 1.24 and the Go module proxy).
To use binaries you already have instead, point KUBEBUILDER_ASSETS at a folder holding
kube-apiserver, kube-controller-manager and etcd (kubectl and kube-scheduler optional):
    export KUBEBUILDER_ASSETS=/path/to/bin
MSG
  exit 1
}

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "building ${missing[*]} $version into $cache (a cold build takes a while)" >&2
cd "$here"
# Stamp the Kubernetes version (a module build reports v0.0.0-master otherwise, which clients
# that check the server version, such as upstream Cluster API's manager, refuse).
minor="${version#v1.}"; minor="${minor%%.*}"
stamp="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for b in "${missing[@]}"; do
  case "$b" in
    etcd) pkg=./cmd/etcd ;;
    *) pkg="k8s.io/kubernetes/cmd/$b" ;;
  esac
  start=$SECONDS
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/$b" "$pkg" \
    || fail "go build of $b ($pkg) failed"
  mv "$tmp/$b" "$cache/$b"
  echo "built $b in $((SECONDS - start))s" >&2
done
echo "$cache"
