"""The KubeadmConfig reconciler and its wiring into a ``Manager``.

``setup`` (re-exported by the package) registers the controller: it reconciles every
``bootstrap.cluster.x-k8s.io/v1beta2`` KubeadmConfig, and is woken by changes to the config, to
its Cluster, and to the MachinePools referencing it when something a reconcile reads changes
(``pool_inputs``: the reference, the Cluster name, the Kubernetes version, whether a Node has
joined, which switches refresh to rotation), not on every scale or status write of the pool.
``tests/integration/bootstrap/test_kubeadm_inputs.py`` holds ``pool_inputs`` to what a
reconcile reads from the pool.

One reconcile, ``runtime.drive`` over the reconciler's steps: read the config (from the
informer, or this controller's newer write of it), snapshot it, run the phases as a chain (each
needs what the ones before it found: the owner, the Cluster, the certificates, the token) until
one stops or fails, write the Ready summary, and patch once (status, only what changed). An
error means a retry with backoff, otherwise the shortest requeue wins
(``runtime.reconcile.phases``).
Before the phases, a config that a MachinePool names but has not adopted yet, or that is paused
and has no owner, is left as it is: the adoption brings it back; one no pool names yet is left
so for a few seconds after its creation, as its pool usually follows it
(``prerequisites.awaiting_adoption``).

A config carries no finalizer, as upstream's does not: it goes the moment it is deleted, and
this controller deletes its bootstrap tokens and data Secret afterwards, from the last state
its informer saw (``Departed``). A finalizer would cost every new config a write, hold its
deletion while the workload cluster is unreachable, and keep it forever in a management
cluster handed back to upstream's provider, which would not release it. What the finalizer
guaranteed and this does not: a config deleted while no replica of this controller runs keeps
its tokens until they expire (``token_ttl``, 15 minutes by default), as upstream's do. The
finalizer an earlier version set is released: on the next reconcile of a live config, or
after the cleanup of one already being deleted.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from machinepool.api import constants as c
from machinepool.api.bootstrap_v1beta2 import KubeadmConfig
from machinepool.api.kinds import CLUSTERS
from machinepool.api.meta import parse_time
from machinepool.api.views import KubeadmConfigView, MachinePoolView
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.data import validate_spec, write_data
from machinepool.bootstrap.kubeadm.delete import delete, release_finalizer
from machinepool.bootstrap.kubeadm.prerequisites import (
    awaiting_adoption,
    check_cluster_ready,
    check_paused,
    load_certificates,
    resolve_cluster,
    resolve_owner,
)
from machinepool.bootstrap.kubeadm.rotation import reconcile_token
from machinepool.bootstrap.kubeadm.scope import KubeadmOptions, Scope
from machinepool.bootstrap.kubeadm.status import summarize
from machinepool.runtime import (
    ClusterCache,
    EventHandler,
    EventRecorder,
    FuncHandler,
    Informer,
    Manager,
    NotFound,
    Obj,
    ObjectKey,
    Outcome,
    OwnReader,
    Patcher,
    Phase,
    Result,
    Steps,
    Stop,
    TerminalError,
    Then,
    copy_obj,
    get_logger,
    run_phases,
)


def _stops(phase: Phase[Scope]) -> Phase[Scope]:
    """``phase``, ending the reconcile with a ``Stop`` (the summary and the write follow) when
    it set ``scope.halt``: the helpers deep in a phase (``Scope.wait``, the render) say that
    the config waits for something by setting it, and this is where it becomes the driver's
    one way to stop."""

    @functools.wraps(phase)
    async def run(scope: Scope) -> Result:
        result = await phase(scope)
        return Stop(requeue_after=result.requeue_after) if scope.halt else result

    return run


RECONCILE_PHASES: tuple[Phase[Scope], ...] = tuple(
    map(
        _stops,
        (
            resolve_owner,
            resolve_cluster,
            check_paused,
            validate_spec,
            check_cluster_ready,
            load_certificates,
            reconcile_token,
            write_data,
        ),
    )
)


async def _owner_for_delete(scope: Scope) -> Result:
    """Like ``resolve_owner``, but never stops a deletion: without a Cluster name there is
    just no workload cluster to clean."""
    await resolve_owner(scope)
    scope.halt = False
    return Result()


DELETE_PHASES: tuple[Phase[Scope], ...] = (_owner_for_delete, delete)


async def _release_old_finalizer(scope: Scope) -> Result:
    """Release the finalizer an earlier version set: one write, once, for such a config."""
    release_finalizer(scope)
    return Result()


CLUSTER_INDEX = "kubeadm-bootstrap/cluster"
CONTROLLER_NAME = "kubeadmconfig"


@dataclass(frozen=True)
class Departed:
    """A config the informer saw deleted: its last state, and when the deletion was seen."""

    config: Obj
    seen_at: datetime


class KubeadmConfigReconciler(Steps[Scope]):
    """Reconciles one KubeadmConfig per call (see the module docstring): ``runtime.drive``
    over these steps, a chain."""

    kind = "KubeadmConfig"
    chain = True

    def __init__(
        self,
        mgr: Manager,
        cluster_cache: ClusterCache,
        configs: Informer,
        options: KubeadmOptions,
        recorder: EventRecorder,
        *,
        machine_pools: Informer,
        clusters: Informer,
    ) -> None:
        self.client = mgr.client
        self.cluster_cache = cluster_cache
        self.configs = configs
        self.machine_pools = machine_pools
        self.clusters = clusters
        self.options = options
        self.recorder = recorder
        self.reader = OwnReader(mgr.client, r.KUBEADM_CONFIGS, configs)
        self.gone: dict[ObjectKey, Departed] = {}
        """Configs seen deleted whose tokens and data Secret are still to be deleted."""
        self.log = get_logger(__name__).bind(controller=CONTROLLER_NAME)

    def note_deleted(self, config: Obj) -> None:
        """The configs informer's delete handler: remember what the cleanup needs. Its key is
        queued by the controller's own handler."""
        self.gone[ObjectKey.of(config)] = Departed(config, datetime.now(UTC))

    async def before(self, key: ObjectKey, obj: Obj | None) -> Result | None:
        """A departed config's cleanup, unless the config is back under the same UID."""
        departed = self.gone.get(key)
        if departed is not None and (obj is None or _uid(obj) != _uid(departed.config)):
            return await self._clean_up(key, departed)
        return None

    def scope(self, key: ObjectKey, obj: Obj, patcher: Patcher) -> Scope | Stop:
        scope = self._scope(key, obj)
        if scope.config.deleting:
            if r.FINALIZER not in (scope.config.metadata.finalizers or []):
                # Another finalizer holds it; the cleanup follows its delete event.
                return Stop(then=Then.NOTHING)
            # An earlier version's finalizer: the cleanup releases it.
            scope.deleted_at = parse_time(str(scope.config.metadata.deletion_timestamp))
        elif (waiting := awaiting_adoption(scope)) is not None:
            # A status now would be one more write per new pool, soon replaced.
            return Stop(requeue_after=waiting.requeue_after, then=Then.NOTHING)
        return scope

    def guards(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return () if scope.config.deleting else (_release_old_finalizer,)

    def phases(self, scope: Scope) -> Sequence[Phase[Scope]]:
        return DELETE_PHASES if scope.config.deleting else RECONCILE_PHASES

    async def report(self, scope: Scope, outcome: Outcome) -> Outcome:
        if not scope.config.deleting:
            summarize(scope)
        return Outcome()

    async def _clean_up(self, key: ObjectKey, departed: Departed) -> Result | None:
        """Delete a departed config's tokens and data Secret; a ``Result`` to come back.

        Asked of the API server first: a config that left this manager's view (its
        ``--watch-filter`` label, or its shard, changed) looks deleted to the informer, and
        its tokens still serve its pool.
        """
        try:
            live = await self.client.get(r.KUBEADM_CONFIGS, key.name, key.namespace)
        except NotFound:
            live = None
        if live is not None and _uid(live) == _uid(departed.config):
            del self.gone[key]
            self.log.info(
                "config left this manager's view; its tokens stay", kubeadmconfig=str(key)
            )
            return None
        try:
            scope = self._scope(key, departed.config)
        except TerminalError:
            del self.gone[key]
            raise
        scope.deleted_at = departed.seen_at
        outcome = await run_phases(scope, DELETE_PHASES, chain=True)
        if outcome.ok and outcome.result.requeue_after is None:
            del self.gone[key]
            return None
        return outcome.settle(f"KubeadmConfig {key} (deleted)")

    def _scope(self, key: ObjectKey, config: Obj) -> Scope:
        try:
            model = KubeadmConfig.from_dict(copy_obj(config))
        except ValidationError as exc:
            raise TerminalError(f"KubeadmConfig {key} does not match the API: {exc}") from exc
        return Scope(
            client=self.client,
            cluster_cache=self.cluster_cache,
            recorder=self.recorder,
            log=self.log.bind(kubeadmconfig=str(key)),
            options=self.options,
            machine_pools=self.machine_pools,
            clusters=self.clusters,
            config=KubeadmConfigView(config),
            model=model,
        )


def _uid(config: Obj) -> str:
    return str((config.get("metadata") or {}).get("uid") or "")


def _cluster_index(config: Obj) -> list[str]:
    meta = KubeadmConfigView(config).metadata
    name = (meta.labels or {}).get(c.CLUSTER_NAME_LABEL)
    return [f"{meta.namespace or ''}/{name}"] if name else []


def _pool_to_config(pool: Obj) -> list[ObjectKey]:
    """A MachinePool's KubeadmConfig, from spec.template.spec.bootstrap.configRef."""
    view = MachinePoolView(pool)
    ref = view.spec.template.spec.bootstrap.config_ref
    group = c.BOOTSTRAP_GROUP if ref.api_group is None else ref.api_group
    if ref.kind != "KubeadmConfig" or group != c.BOOTSTRAP_GROUP:
        return []
    return [ObjectKey(view.metadata.namespace or "", str(ref.name or ""))]


def _pool_config_index(pool: Obj) -> list[str]:
    return [str(key) for key in _pool_to_config(pool)]


def pool_inputs(pool: Obj) -> tuple[object, ...]:
    """What a KubeadmConfig reconcile reads from a MachinePool: the config it references, its
    Cluster name, its Kubernetes version (which picks the kubeadm API, and which the render
    refuses before v1.22), and whether a Node has joined (``rotation.consumed``)."""
    view = MachinePoolView(pool)
    return (
        _pool_to_config(pool),
        view.spec.cluster_name,
        view.spec.template.spec.version,
        bool(view.status.node_refs),
    )


class PoolEvents:
    """Passes a MachinePool's add and delete to ``inner``, and an update only when
    ``pool_inputs`` changed: a pool changes on every scale and status write, and no other
    change can change its config's reconcile (which requeues itself for what has no event)."""

    def __init__(self, inner: EventHandler) -> None:
        self._inner = inner

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        self._inner.on_add(obj, initial)

    def on_update(self, old: Obj, new: Obj) -> None:
        if pool_inputs(old) != pool_inputs(new):
            self._inner.on_update(old, new)

    def on_delete(self, obj: Obj) -> None:
        self._inner.on_delete(obj)


def _cluster_to_configs(configs: Informer, pools: Informer) -> Callable[[Obj], list[ObjectKey]]:
    def mapper(cluster: Obj) -> list[ObjectKey]:
        key = ObjectKey.of(cluster)
        found = {ObjectKey.of(cfg) for cfg in configs.by_index(CLUSTER_INDEX, str(key))}
        for pool in pools.list(key.namespace):
            if MachinePoolView(pool).spec.cluster_name == key.name:
                found.update(_pool_to_config(pool))
        return sorted(found)

    return mapper


async def setup(
    mgr: Manager, cluster_cache: ClusterCache, options: KubeadmOptions | None = None
) -> None:
    """Register the KubeadmConfig controller on ``mgr`` (``options``: defaults if omitted)."""
    options = options or KubeadmOptions()
    configs = await mgr.cache.get_informer(r.KUBEADM_CONFIGS)
    pools = await mgr.cache.get_informer(r.MACHINE_POOLS)
    for informer, name, index in (
        (configs, CLUSTER_INDEX, _cluster_index),
        (pools, r.POOL_CONFIG_INDEX, _pool_config_index),
    ):
        with contextlib.suppress(ValueError):  # added already, by an earlier setup
            informer.add_indexer(name, index)
    clusters = await mgr.cache.get_informer(CLUSTERS)
    recorder = mgr.event_recorder(r.COMPONENT)
    reconciler = KubeadmConfigReconciler(
        mgr, cluster_cache, configs, options, recorder, machine_pools=pools, clusters=clusters
    )
    ctrl = mgr.new_controller(
        CONTROLLER_NAME, reconciler, concurrency=options.kubeadmconfig_concurrency
    )
    configs.add_handler(FuncHandler(delete=reconciler.note_deleted))
    ctrl.watch(configs)
    # Not ctrl.watch: that would queue on every pool update. Every config is queued when the
    # controller starts (it watches them all), so pools need no replay of their own.
    pools.add_handler(PoolEvents(ctrl.handler(_pool_to_config)))
    ctrl.watch(clusters, _cluster_to_configs(configs, pools))
