"""Upstream's providers as its release ships them, for running them as Pods: the image a
manager is put in and the components that name it (``machinepool.controlplane.upstream``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from machinepool.controlplane import upstream

RENDERED = """\
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
      - image: gcr.io/k8s-staging-cluster-api/cluster-api-controller:main
        imagePullPolicy: Always
        name: manager
"""
"""The part of ``kustomize build core/config/default`` its release changes."""


def test_components_name_the_release_image_pulled_only_if_not_present() -> None:
    released = upstream.as_released(RENDERED, "manager")
    reference = f"registry.k8s.io/cluster-api/cluster-api-controller:{upstream.version()}"
    assert f"image: {reference}\n" in released
    assert "imagePullPolicy: IfNotPresent\n" in released
    assert "gcr.io" not in released
    assert "Always" not in released


def test_a_rendering_without_the_staging_image_is_refused() -> None:
    """A module whose manifests changed shape fails here, not as a Pod that pulls for ever."""
    with pytest.raises(RuntimeError, match="not once"):
        upstream.as_released(RENDERED, "bootstrap")


def test_the_manager_image_is_the_binary_alone_run_as_non_root() -> None:
    spec = upstream.manager_image("bootstrap", Path("/bin/true"))
    assert spec.reference == (
        f"registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:{upstream.version()}"
    )
    assert spec.debian is None
    assert spec.python is None
    assert [f.path for f in spec.files] == ["/manager"]
    assert spec.entrypoint == ("/manager",)  # the Deployment's command
    assert spec.user == "65532:65532"  # the Deployment's runAsUser and runAsGroup
