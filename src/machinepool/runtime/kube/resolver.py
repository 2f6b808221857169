"""Contract resolution: which served version of a referenced kind speaks our Cluster API contract.

A MachinePool names its bootstrap config and infra pool by ``{apiGroup, kind}`` only; the
provider says which of its versions speaks the contract with a label on its CRD,
``cluster.x-k8s.io/<contract>: <versions>`` (joined by ``_``, the last one wins), and without
that label the group's preferred version is used, as upstream resolves it.

Why here, in the runtime: the core controllers, the webhooks (conversion rewrites references
to the version the contract names) and the CLI all resolve references, and the controllers and
webhooks are siblings that may not import each other; the lowest layer that holds a ``Client``
is this one. It knows no Cluster API kind, only the label convention (from ``api.constants``),
so the generic ``Client`` stays free of Cluster API and this module is the one place that
convention is read.
"""

from __future__ import annotations

from machinepool.api.constants import CONTRACT_LABEL
from machinepool.api.meta import dig
from machinepool.runtime.kube.client import CRDS, Client, Resource
from machinepool.runtime.kube.errors import NotFound

__all__ = ["ContractResolver", "contract_resource"]


async def contract_resource(client: Client, group: str, kind: str) -> Resource:
    """The served ``Resource`` of ``kind`` in ``group`` at our contract's version.

    Raises ``NotFound`` when the group or kind is not served (or ``group`` is empty), and any
    other ``ApiError`` of discovery as it comes.
    """
    if not group:
        raise NotFound(404, "NotFound", f"kind {kind}: apiGroup is empty")
    info = await client.request("GET", f"/apis/{group}", verb="discovery")
    preferred = str(dig(info, "preferredVersion", "version", default=""))
    base = await client.resource(f"{group}/{preferred}", kind)
    try:
        crd = await client.get(CRDS, f"{base.plural}.{group}")
    except NotFound:
        return base
    labels = dig(crd, "metadata", "labels", default={})
    versions = [v for v in str(labels.get(CONTRACT_LABEL, "")).split("_") if v]
    if not versions or versions[-1] == preferred:
        return base
    return await client.resource(f"{group}/{versions[-1]}", kind)


class ContractResolver:
    """``contract_resource`` for a long-lived component, remembering answers.

    Only successful lookups are remembered, so a CRD installed later is picked up on the next
    call; a label changed later is seen by a new resolver (the webhooks, which must follow it,
    call ``contract_resource`` behind a short-lived cache instead).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._known: dict[tuple[str, str], Resource] = {}

    async def resolve(self, group: str, kind: str) -> Resource:
        """The resource; ``NotFound`` when the group or kind is not served."""
        known = self._known.get((group, kind))
        if known is None:
            known = self._known[(group, kind)] = await contract_resource(self._client, group, kind)
        return known
