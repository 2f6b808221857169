#!/usr/bin/env bash
# Builds cert-manager's controller, webhook and cainjector (static binaries, CGO_ENABLED=0) from a
# source folder into a cache outside the repo, with the release's Helm chart (its Chart.yaml
# made as the release makes it) and a `helm` built from the Go module proxy to render it, and
# prints the cache folder. Built once per release, then reused. Called by `make clients` and
# tests/support/certmanager.py (and by hand).
#
#   CERT_MANAGER_SRC=/path/to/cert-manager-v1.20.3 hack/certmanager/build.sh
#       -> prints e.g. ~/.cache/machinepool/certmanager/v1.20.3
#
# That folder then holds controller, webhook, cainjector, helm, chart/ (deploy/charts/cert-manager,
# whose templates hold the CRDs too), namespace.yaml and LICENSE. Where it comes from, first match wins:
#   the cache                              what an earlier run built
#   CERT_MANAGER_SRC=/path/to/source       the cert-manager repository at tag $RELEASE
# The module proxy serves cert-manager's main module but not the modules its binaries are built
# from (cmd/controller and the others replace the main module with ../../), so the source is a
# folder; its dependencies are ordinary modules and come from the proxy. .ci/run copies the
# shared third_party copy to a folder outside ../shared and names it here.
#
#   hack/certmanager/build.sh --check   exit 0 when the cache is complete or the source is named
#                                       (so cert-manager can be had); prints nothing
set -euo pipefail

RELEASE=v1.20.3
HELM_MODULE=helm.sh/helm/v3
HELM_VERSION=v3.20.2
BINARIES=(controller webhook cainjector)

fail() {
  cat >&2 <<MSG
error: $1
cert-manager $RELEASE is built from its source folder (Go >= 1.25; dependencies and helm from the
Go module proxy). Name the source (the cert-manager repository at tag $RELEASE, copied where the
build may write):
    export CERT_MANAGER_SRC=/path/to/cert-manager-$RELEASE
MSG
  exit 1
}

cache="${MACHINEPOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/machinepool}/certmanager/$RELEASE"
src="${CERT_MANAGER_SRC:-}"

complete() {
  for b in "${BINARIES[@]}" helm; do [ -x "$cache/$b" ] || return 1; done
  [ -f "$cache/chart/Chart.yaml" ] && [ -f "$cache/namespace.yaml" ] && [ -f "$cache/LICENSE" ]
}

if [ "${1:-}" = "--check" ]; then
  complete || [ -n "$src" ]
  exit
fi
if complete; then echo "$cache"; exit 0; fi

[ -n "$src" ] || fail "no complete build in $cache and CERT_MANAGER_SRC is not set"
[ -f "$src/cmd/controller/go.mod" ] && [ -f "$src/deploy/charts/cert-manager/Chart.template.yaml" ] \
  || fail "CERT_MANAGER_SRC=$src is not a cert-manager source folder (no cmd/controller/go.mod)"
command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH"

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
ldflags="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$RELEASE"
for b in "${BINARIES[@]}"; do
  [ -x "$cache/$b" ] && continue
  echo "building cert-manager $b $RELEASE from $src (the first, cold, takes minutes)" >&2
  (cd "$src/cmd/$b" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" .) \
    || fail "go build in $src/cmd/$b failed"
  mv "$tmp/$b" "$cache/$b"
done
if [ ! -x "$cache/helm" ]; then
  echo "building helm $HELM_VERSION from the Go module proxy" >&2
  (cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/bin" go install -trimpath -ldflags "-s -w" \
    "$HELM_MODULE/cmd/helm@$HELM_VERSION") || fail "go install $HELM_MODULE/cmd/helm@$HELM_VERSION failed"
  mv "$tmp/bin/helm" "$cache/helm"
fi
# The chart as the release packages it: Chart.yaml from its template with the release's version
# (make/manifests.mk), the README template left out.
rm -rf "$tmp/chart" && cp -r "$src/deploy/charts/cert-manager" "$tmp/chart"
sed -e "s/^version: .*/version: $RELEASE/" -e "s/^appVersion: .*/appVersion: $RELEASE/" \
  -e 's/{{IS_PRERELEASE}}/false/' "$tmp/chart/Chart.template.yaml" > "$tmp/chart/Chart.yaml"
rm -f "$tmp/chart/Chart.template.yaml" "$tmp/chart/README.template.md" "$tmp/chart/signkey_annotation.txt"
cp "$src/LICENSE" "$cache/LICENSE"  # goes into the images, as the release's do
cp "$src/deploy/manifests/namespace.yaml" "$tmp/namespace.yaml"
rm -rf "$cache/chart" && mv "$tmp/chart" "$cache/chart" && mv "$tmp/namespace.yaml" "$cache/namespace.yaml"
echo "built cert-manager $RELEASE in $((SECONDS - start))s" >&2
echo "$cache"
