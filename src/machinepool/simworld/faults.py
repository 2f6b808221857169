"""The injected faults of every namespace, from one watch instead of a read per backend.

``FaultsWatch`` keeps an informer over the ``machinepool-sim-faults`` ConfigMaps of all
namespaces (a field selector on the name, so no other ConfigMap is listed or kept) and answers
``await watch.faults(namespace)`` from it. The sim provider's ``setup``
(``machinepool.providers.sim``) builds one and registers it on the manager; ``SimProvider`` asks
it for the faults each time it builds a backend.

A change made with ``SimCloud.set_faults`` reaches the informer one watch event later
(milliseconds), so it applies from the next backend built after that. Until the informer has
listed once (after each start) the ConfigMap is read from the API server instead.

The manager runs controllers while it leads and cancels them when it stops or loses the
Lease, which is the lifetime this informer needs (only pool reconciles read faults), and it has
no other hook for a background task; so ``FaultsWatch`` is a ``Controller`` whose ``run`` keeps
the informer alive and reconciles nothing. Each ``run`` starts a fresh informer, so a copy
left from an earlier term of leadership is never served.
"""

from __future__ import annotations

import asyncio

from machinepool.runtime import CONFIGMAPS, Client, Controller, Informer, ObjectKey, Result
from machinepool.simworld.cloud import FAULTS_CONFIGMAP, Faults, SimCloud

__all__ = ["FaultsWatch"]

CONTROLLER_NAME = "sim-faults"


async def _nothing(_key: ObjectKey) -> Result | None:
    return None


class FaultsWatch(Controller):
    """Faults by namespace from a watch of the faults ConfigMaps (see the module docstring)."""

    def __init__(self, client: Client, namespaces: tuple[str, ...] = ()) -> None:
        super().__init__(CONTROLLER_NAME, _nothing)
        self._client = client
        self._namespaces = namespaces  # the manager's --namespace scope; () for all
        self._cloud = SimCloud(client)
        self._informer: Informer | None = None

    async def faults(self, namespace: str) -> Faults:
        """The faults in force in ``namespace`` (none when it has no faults ConfigMap)."""
        informer = self._informer
        if informer is None or not informer.has_synced:
            return await self._cloud.faults(namespace)
        cm = informer.get(FAULTS_CONFIGMAP, namespace)
        return Faults.from_configmap((cm or {}).get("data") or {})

    async def run(self) -> None:
        """Watch until cancelled (the manager stops or loses the Lease)."""
        informer = Informer(
            self._client,
            CONFIGMAPS,
            namespaces=self._namespaces,
            field_selector=f"metadata.name={FAULTS_CONFIGMAP}",
            logger=self.log,
        )
        await informer.start()
        self._informer = informer
        try:
            await asyncio.Event().wait()
        finally:
            self._informer = None
            await informer.stop()
