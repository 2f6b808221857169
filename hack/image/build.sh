#!/usr/bin/env bash
# Builds an OCI image offline into the cache and prints its size and where it is (`make image`).
# No registry and no container engine: Debian packages by mmdebstrap from this machine's apt
# sources, the project's wheel and its dependencies from PyPI, layers assembled by umoci, and a
# docker archive by skopeo for `ctr -n k8s.io images import`. What goes into an image, and how
# it is keyed so that a second build is a no-op: src/machinepool/controlplane/images.py.
#
#   hack/image/build.sh [NAME]          build (default: machinepool), e.g. prints
#       image machinepool:0.2.0: 270 MiB unpacked, 85 MiB compressed, 2 layer(s); ~/.cache/...
#   hack/image/build.sh --check [NAME]  exit 0 when the image is cached or can be built here
#                                       (root; apt-get for the tools), else say why in one line
#
# Needs root; missing tools (mmdebstrap, umoci, skopeo) are installed with apt-get.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || { echo "error: no $python: run 'make setup' first" >&2; exit 1; }
exec "$python" -m machinepool.controlplane.images "$@"
