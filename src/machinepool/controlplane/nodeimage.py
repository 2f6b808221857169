"""The one container image the real node needs, built offline: Debian's static busybox.

No registry is reachable here, so the Pod sandbox ("pause") image cannot be pulled. This builds
the smallest image that serves: an empty OCI image (umoci) with ``/bin/busybox`` from the
``busybox-static`` package and links for the applets tests use, whose default command sleeps
for ever. containerd runs it as every Pod's sandbox, and tests run their Pods from it too
(``imagePullPolicy: Never``). The archive is built once per busybox version into
``~/.cache/machinepool/node/`` and imported into the node's containerd
(``ctr -n k8s.io images import``), as any image built offline would be.

Called by ``controlplane.node`` when a real node starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from machinepool.controlplane.binaries import cache_dir

BUSYBOX = Path("/bin/busybox")
IMAGE_NAME = "machinepool.local/busybox"
"""The repository name images are imported under; the tag is busybox's version."""
APPLETS = ("sh", "sleep", "nc", "wget", "cat", "echo", "true")
SLEEP_FOR_EVER = ("/bin/sleep", "2147483647")
"""The image's command: what a sandbox runs until containerd kills it (it ignores SIGTERM
as PID 1, and the CRI stops sandboxes with SIGKILL)."""


def busybox_version() -> str:
    """The busybox version, from its own banner (``BusyBox v1.35.0 (...)``)."""
    out = subprocess.run([str(BUSYBOX)], capture_output=True, text=True, check=False).stdout
    words = out.split()
    if len(words) < 2 or not words[1].startswith("v"):
        raise RuntimeError(f"{BUSYBOX} does not look like busybox: {out[:80]!r}")
    return words[1][1:]


def image_reference() -> str:
    return f"{IMAGE_NAME}:{busybox_version()}"


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def build_archive() -> Path:
    """The OCI archive (a tar of an OCI layout), built unless already in the cache."""
    version = busybox_version()
    archive = cache_dir().parent.parent / "node" / f"busybox-{version}.oci.tar"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".build-") as tmp:
        layout, bundle = Path(tmp) / "layout", Path(tmp) / "bundle"
        image = f"{layout}:{version}"
        _run("umoci", "init", "--layout", str(layout))
        _run("umoci", "new", "--image", image)
        _run("umoci", "unpack", "--image", image, str(bundle))
        bin_dir = bundle / "rootfs" / "bin"
        bin_dir.mkdir(parents=True)
        shutil.copy2(BUSYBOX, bin_dir / "busybox")
        for applet in APPLETS:
            os.symlink("busybox", bin_dir / applet)
        _run("umoci", "repack", "--image", image, str(bundle))
        _run(
            "umoci",
            "config",
            "--image",
            image,
            *(arg for word in SLEEP_FOR_EVER for arg in ("--config.cmd", word)),
        )
        _run("umoci", "gc", "--layout", str(layout))
        partial = archive.with_suffix(".partial")
        _run("tar", "-C", str(layout), "-cf", str(partial), ".")
        partial.rename(archive)
    return archive
