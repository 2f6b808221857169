"""The committed CRD files are exactly what the models generate."""

from __future__ import annotations

from machinepool.api.crdgen import CRD_DIR, crd_file_name, crd_manifests, render


def test_committed_crds_are_fresh() -> None:
    expected = {crd_file_name(m): render(m) for m in crd_manifests()}
    actual = {p.name: p.read_text() for p in CRD_DIR.glob("*.yaml")}

    assert actual == expected, "CRDs are stale: run python -m machinepool.api.crdgen"
