"""The shard assigner: one reconcile per Cluster key, run by the ring's leader only.

A reconcile gathers the Cluster's objects from unfiltered informers of its own, finds the
Cluster's shard on the ring of live shard Leases, and then either

- drains: some object of a kind that a controller acknowledges still sits on another *live*
  shard unacknowledged, so those objects get the drain label and the reconcile waits for the
  old shard to acknowledge (a label change, an event that brings the Cluster back here); or
- assigns: nothing is held elsewhere any more (all acknowledged, or the old shard's Lease
  expired), so the objects get the new shard's label and lose the drain label: first
  everything but the MachinePools, then, on the next pass, the MachinePools.

So the new shard starts on a Cluster only after the old one stopped on every object of it:
a Cluster is never reconciled by two replicas at once. Objects a shard creates (Machines,
infra machines) inherit the label from their pool (``api.constants.inherited_labels``), and
new objects a user creates are labelled on the event of their creation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from machinepool.api import constants as c
from machinepool.api.kinds import CLUSTERS, MACHINE_POOLS
from machinepool.runtime import (
    DRAIN_ACKNOWLEDGED,
    DRAIN_REQUESTED,
    LEASES,
    Client,
    Controller,
    Handover,
    HashRing,
    Informer,
    InformerCache,
    LeaderElectionConfig,
    LeaderElector,
    LiveLeases,
    NotFound,
    Obj,
    ObjectKey,
    Resource,
    Result,
    RuntimeMetrics,
    gather_bounded,
    get_logger,
    labels_of,
)

ASSIGNER_NAME = "shard-assigner"
BY_CLUSTER = "cluster"
BY_REF = "ref"
ASSIGNER_WORKERS = 4
"""Clusters placed at once."""
STALE_LEASE_FACTOR = 4
"""A shard Lease silent for this many lease durations belongs to a replica that is gone."""

log = get_logger(__name__)


@dataclass(frozen=True)
class RingConfig:
    """One sharded manager's ring: ``election`` is the ring leader's Lease (the assigner's),
    ``shard_selector`` lists the shard Leases, ``resources`` are the kinds the assigner reads
    (Clusters and MachinePools among them), ``labelled`` those of them it labels."""

    election: LeaderElectionConfig
    shard_selector: str
    resources: tuple[Resource, ...]
    labelled: frozenset[Resource]


def _cluster_index(obj: Obj) -> list[str]:
    meta = obj.get("metadata") or {}
    if obj.get("kind") == "MachinePool":
        name = (obj.get("spec") or {}).get("clusterName")
    else:
        name = (meta.get("labels") or {}).get(c.CLUSTER_NAME_LABEL)
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def _pool_refs(mp: Obj) -> list[tuple[str, str]]:
    """(kind, name) of a MachinePool's bootstrap config and infra pool."""
    spec = ((mp.get("spec") or {}).get("template") or {}).get("spec") or {}
    refs = [
        (spec.get("bootstrap") or {}).get("configRef") or {},
        spec.get("infrastructureRef") or {},
    ]
    return [(str(r["kind"]), str(r["name"])) for r in refs if r.get("kind") and r.get("name")]


def _ref_index(mp: Obj) -> list[str]:
    ns = (mp.get("metadata") or {}).get("namespace", "")
    return [f"{kind}/{ns}/{name}" for kind, name in _pool_refs(mp)]


class Assigner(Controller):
    """See the module docstring. A ``Controller`` so the manager runs it while this replica
    holds its own shard Lease; inside, it also campaigns for the ring's Lease."""

    def __init__(
        self,
        client: Client,
        ring: RingConfig,
        handover: Handover,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        # Clusters are independent keys: after a replica dies, all of its Clusters move at once
        # rather than one after another behind a single worker.
        super().__init__(
            ASSIGNER_NAME,
            self._reconcile_cluster,
            concurrency=ASSIGNER_WORKERS,
            metrics=metrics,
        )
        self.client = client
        self.ring = ring
        self.handover = handover
        self._cache = InformerCache(client)
        self._informers: dict[Resource, Informer] = {}
        self._leases: LiveLeases | None = None
        self._live: frozenset[str] = frozenset()
        self._ring = HashRing(())

    # -- running --------------------------------------------------------------------------

    async def run(self) -> None:
        # The ring's Lease beside the replica's own in leader_election_master_status: which
        # replica assigns is what an operator asks first when Clusters do not move.
        leader = self.metrics.leader.labels(self.ring.election.name)
        leader.set(0)
        elector = LeaderElector(
            self.client,
            self.ring.election,
            on_change=lambda leading: leader.set(1 if leading else 0),
            logger=self.log,
        )
        try:
            while True:
                await elector.acquire()
                await self._start_informers()
                async with asyncio.TaskGroup() as group:
                    workers = group.create_task(super().run())
                    ticker = group.create_task(self._watch_members())
                    await elector.hold()
                    workers.cancel()
                    ticker.cancel()
        finally:
            await elector.release()

    async def _start_informers(self) -> None:
        if self._informers:
            return
        for res in self.ring.resources:
            informer = await self._cache.get_informer(res, wait_synced=False)
            informer.add_indexer(BY_CLUSTER, _cluster_index)
            if res == MACHINE_POOLS:
                informer.add_indexer(BY_REF, _ref_index)
            self._informers[res] = informer
            self.watch(informer, self._clusters_of)
        leases = await self._cache.get_informer(
            LEASES, self.ring.election.namespace, label_selector=self.ring.shard_selector
        )
        self._leases = LiveLeases(leases)
        await self._cache.start()
        await self._cache.wait_synced()
        self._set_live(self._leases.live())

    async def _watch_members(self) -> None:
        """Re-place every Cluster when the set of live shards changes; forget dead Leases."""
        assert self._leases is not None
        period = self.ring.election.retry_period
        while True:
            live = self._leases.live()
            if live != self._live:
                log.info("shards changed", live=",".join(sorted(live)))
                self._set_live(live)
                for cluster in self._informers[CLUSTERS].list():
                    self.enqueue(ObjectKey.of(cluster))
            stale = self._leases.expired(STALE_LEASE_FACTOR * self.ring.election.lease_duration)
            for key in stale:
                with contextlib.suppress(NotFound):
                    await self.client.delete(LEASES, key.name, key.namespace)
            await asyncio.sleep(period)

    def _set_live(self, live: frozenset[str]) -> None:
        self._live, self._ring = live, HashRing(live)

    # -- mapping --------------------------------------------------------------------------

    def _clusters_of(self, obj: Obj) -> list[ObjectKey]:
        if obj.get("kind") == "Cluster":
            return [ObjectKey.of(obj)]
        found = _cluster_index(obj)
        if not found:  # a config or infra pool not adopted yet: through the pools naming it
            meta = obj.get("metadata") or {}
            ref = f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"
            pools = self._informers[MACHINE_POOLS].by_index(BY_REF, ref)
            found = [v for mp in pools for v in _cluster_index(mp)]
        return [ObjectKey(*value.split("/", 1)) for value in found]

    def _objects_of(self, key: ObjectKey) -> list[tuple[Resource, Obj]]:
        value = f"{key.namespace}/{key.name}"
        by_kind = {res.kind: (res, inf) for res, inf in self._informers.items()}
        found: dict[tuple[Resource, ObjectKey], Obj] = {}
        for res, informer in self._informers.items():
            for obj in informer.by_index(BY_CLUSTER, value) if res != CLUSTERS else []:
                found[(res, ObjectKey.of(obj))] = obj
        for mp in self._informers[MACHINE_POOLS].by_index(BY_CLUSTER, value):
            for kind, name in _pool_refs(mp):
                res_inf = by_kind.get(kind)
                ref = res_inf[1].get(name, key.namespace) if res_inf else None
                if res_inf is not None and ref is not None:
                    found[(res_inf[0], ObjectKey.of(ref))] = ref
        return [(res, obj) for (res, _k), obj in found.items()]

    # -- reconciling ----------------------------------------------------------------------

    async def _reconcile_cluster(self, key: ObjectKey) -> Result | None:
        cluster = self._informers[CLUSTERS].get_key(key)
        if cluster is None:
            return None
        if not self._live:
            return Result(requeue_after=self.ring.election.retry_period)
        shard = self._ring.owner(str(key))
        assert shard is not None
        members = [
            (res, obj)
            for res, obj in [(CLUSTERS, cluster), *self._objects_of(key)]
            if res in self.ring.labelled
        ]
        labels = self.handover.labels
        held = [
            (res, obj)
            for res, obj in members
            if res in self.handover.acknowledging
            and labels_of(obj).get(labels.shard) not in (None, "", shard)
            and labels_of(obj).get(labels.shard) in self._live
            and labels_of(obj).get(labels.drain) != DRAIN_ACKNOWLEDGED
        ]
        if held:
            requested = {labels.drain: DRAIN_REQUESTED}
            await self._label(
                ((r, o) for r, o in held if labels.drain not in labels_of(o)), requested
            )
            return None
        moved = [
            (res, obj)
            for res, obj in members
            if labels_of(obj).get(labels.shard) != shard or labels.drain in labels_of(obj)
        ]
        # Everything a MachinePool reads first, the MachinePools last (on a later pass, woken
        # by these label events): the new shard never meets a pool whose infra pool or
        # bootstrap config it cannot see yet.
        first = [(r, o) for r, o in moved if r != MACHINE_POOLS]
        await self._label(first or moved, {labels.shard: shard, labels.drain: None})
        return None

    async def _label(
        self, objects: Iterable[tuple[Resource, Obj]], labels: Mapping[str, str | None]
    ) -> None:
        """Label the objects together (a Cluster's Machines and infra machines number as many
        as its Nodes); one gone meanwhile needs no label, any other failure is raised."""
        patch = {"metadata": {"labels": dict(labels)}}
        results = await gather_bounded(
            self.client.patch(res, obj["metadata"]["name"], patch, obj["metadata"].get("namespace"))
            for res, obj in objects
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NotFound):
                raise result
