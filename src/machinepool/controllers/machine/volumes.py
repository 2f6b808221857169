"""Which volumes still hold a drained Node, before its Machine's deletion may delete it.

Called by ``controller`` after the drain. Pods are gone before their volumes are detached
(the CSI driver detaches asynchronously); deleting the Node, and so the instance, earlier can
lose or leak data for some storage systems, so the deletion waits, as upstream's does, for
what ``status.volumesAttached`` and attached VolumeAttachments name, matched to
PersistentVolumes. Volumes of pods the drain leaves on the Node (DaemonSet and mirror pods)
are not waited for: those pods never leave.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from machinepool.api.views import NodeView, PersistentVolumeView, PodView, VolumeAttachmentView
from machinepool.controllers.machine.drain import should_evict
from machinepool.runtime import (
    PERSISTENT_VOLUMES,
    PODS,
    VOLUME_ATTACHMENTS,
    Client,
    Obj,
)

SHOWN = 5
"""Names listed per kind in the message before "... (N more)" (upstream's limit)."""


@dataclass
class Attached:
    """What still holds the Node, each list sorted."""

    claims: list[str] = field(default_factory=list)
    """``ns/name`` of PersistentVolumeClaims whose volumes are attached."""
    volumes_without_claim: list[str] = field(default_factory=list)
    """Attached PersistentVolumes not bound to a PersistentVolumeClaim."""
    node_names_without_volume: list[str] = field(default_factory=list)
    """``status.volumesAttached`` names no PersistentVolume matches."""
    attachment_names_without_volume: list[str] = field(default_factory=list)
    """PersistentVolume names of VolumeAttachments that name no PersistentVolume."""

    def __bool__(self) -> bool:
        return bool(
            self.claims
            or self.volumes_without_claim
            or self.node_names_without_volume
            or self.attachment_names_without_volume
        )

    def message(self, started: str) -> str:
        """The Deleting condition's message, in upstream's words."""
        lines = [f"Waiting for Node volumes to be detached (started at {started})"]
        for title, names in (
            ("PersistentVolumeClaims", self.claims),
            (
                "PersistentVolumes without a .spec.claimRef to a PersistentVolumeClaim",
                self.volumes_without_claim,
            ),
            (
                "Node with .status.volumesAttached entries not matching a PersistentVolume",
                self.node_names_without_volume,
            ),
            (
                "VolumeAttachment with .spec.source.persistentVolumeName not matching a"
                " PersistentVolume",
                self.attachment_names_without_volume,
            ),
        ):
            if names:
                lines.append(f"* {title}: {_shortened(names)}")
        return "\n".join(lines)


def _shortened(names: list[str]) -> str:
    shown = names[:SHOWN]
    if len(names) > SHOWN:
        shown.append(f"... ({len(names) - SHOWN} more)")
    return ", ".join(shown)


def _csi_name(volume: Obj) -> str | None:
    """How ``status.volumesAttached`` names a CSI PersistentVolume."""
    csi = PersistentVolumeView(volume).spec.csi
    if not isinstance(csi, dict):
        return None
    return f"kubernetes.io/csi/{csi.get('driver')}^{csi.get('volumeHandle')}"


def _claims_of(pods: Iterable[Obj]) -> set[str]:
    return {
        f"{pod.metadata.namespace}/{volume['persistentVolumeClaim']['claimName']}"
        for pod in map(PodView, pods)
        for volume in pod.spec.volumes or []
        if isinstance(volume, dict) and isinstance(volume.get("persistentVolumeClaim"), dict)
    }


def attached(
    node: Obj, attachments: list[Obj], volumes: list[Obj], pods_left: list[Obj]
) -> Attached:
    """What still holds ``node``: its attached volume names and the PersistentVolumes of its
    attached VolumeAttachments, matched to ``volumes``, less the claims of ``pods_left``
    (the pods the drain leaves on the Node) (pure)."""
    node_names = {
        str(v["name"])
        for v in NodeView(node).status.volumes_attached or []
        if isinstance(v, dict) and v.get("name")
    }
    pv_names = {
        str(VolumeAttachmentView(a).spec.source.persistent_volume_name) for a in attachments
    }
    found_node_names: set[str] = set()
    found_pv_names: set[str] = set()
    claims: set[str] = set()
    without_claim: list[str] = []
    for volume in volumes:
        name = str(PersistentVolumeView(volume).metadata.name)
        csi = _csi_name(volume)
        matched = {csi} & node_names if csi else set()
        found_node_names |= matched
        if name in pv_names:
            found_pv_names.add(name)
        if not matched and name not in pv_names:
            continue
        ref = PersistentVolumeView(volume).spec.claim_ref
        if not isinstance(ref, dict) or ref.get("kind") != "PersistentVolumeClaim":
            without_claim.append(name)
        else:
            claims.add(f"{ref.get('namespace')}/{ref.get('name')}")
    return Attached(
        claims=sorted(claims - _claims_of(pods_left)),
        volumes_without_claim=sorted(without_claim),
        node_names_without_volume=sorted(node_names - found_node_names),
        attachment_names_without_volume=sorted(pv_names - found_pv_names),
    )


async def still_attached(client: Client, node: Obj) -> Attached:
    """Read what ``attached`` needs from the workload cluster and return what holds ``node``.

    Lists PersistentVolumes and VolumeAttachments only when the Node reports attached
    volumes or some VolumeAttachment is attached to it.
    """
    view = NodeView(node)
    name = str(view.metadata.name)
    attachments = [
        a
        for a in map(VolumeAttachmentView, (await client.list(VOLUME_ATTACHMENTS)).items)
        if a.spec.node_name == name and a.status.attached is True
    ]
    if not attachments and not view.status.volumes_attached:
        return Attached()
    for a in attachments:
        if not a.spec.source.persistent_volume_name:
            raise ValueError(
                f"spec.source.persistentVolumeName of VolumeAttachment {a.metadata.name} is not set"
            )
    volumes = (await client.list(PERSISTENT_VOLUMES)).items
    pods = (await client.list(PODS, field_selector=f"spec.nodeName={name}")).items
    return attached(
        node, [a.raw for a in attachments], volumes, [p for p in pods if not should_evict(p)]
    )
