"""Finding the control-plane binaries: kube-apiserver, etcd, kube-controller-manager.

Order of precedence:

1. ``KUBEBUILDER_ASSETS``, when it names a folder holding the binaries (nothing is built);
2. the build cache, ``$MACHINEPOOL_CACHE`` or ``~/.cache/machinepool``, ``controlplane/<version>``;
3. building them from Go modules with ``hack/controlplane/build.sh`` (source checkouts only).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
REQUIRED = ("kube-apiserver", "kube-controller-manager", "etcd")


class BinariesNotFound(RuntimeError):
    """The binaries are neither configured, cached, nor buildable here."""


def cache_dir() -> Path:
    root = os.environ.get("MACHINEPOOL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "machinepool"
    )
    return Path(root) / "controlplane" / KUBERNETES_VERSION


def _complete(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in REQUIRED)


def _build_script() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "hack" / "controlplane" / "build.sh"
        if candidate.exists():
            return candidate
    return None


def find_binaries(*, build: bool = True) -> Path:
    """Return the folder holding the control-plane binaries, building them if allowed."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and _complete(Path(assets)):
        return Path(assets)
    cached = cache_dir()
    if _complete(cached):
        return cached
    script = _build_script()
    if not build or script is None:
        raise BinariesNotFound(
            f"kube-apiserver, kube-controller-manager and etcd were not found in {cached}"
            + (f" or KUBEBUILDER_ASSETS={assets}" if assets else "")
            + ". Build them with hack/controlplane/build.sh from a source checkout, or set "
            "KUBEBUILDER_ASSETS to a folder that holds them."
        )
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BinariesNotFound(result.stderr.strip() or "hack/controlplane/build.sh failed")
    return Path(result.stdout.strip().splitlines()[-1])


def optional_binary(name: str) -> Path | None:
    """A binary that only some features need (kubectl, kube-scheduler), if present."""
    for folder in (os.environ.get("KUBEBUILDER_ASSETS"), str(cache_dir())):
        if folder and os.access(Path(folder) / name, os.X_OK):
            return Path(folder) / name
    return None
