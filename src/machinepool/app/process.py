"""Builds and runs one controller process from ``Options``; see the package docstring."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from machinepool.api import constants as c
from machinepool.api.features import MACHINE_POOL_NODE_TAINTS, FeatureGates
from machinepool.api.infra_aws import AWSMACHINEPOOLS, AWSMACHINES
from machinepool.api.infra_aws import GROUP as AWS_GROUP
from machinepool.api.infra_sim import SIM_MACHINE_POOLS, SIM_MACHINES
from machinepool.api.kinds import (
    CLUSTERS,
    KUBEADM_CONFIGS,
    MACHINE_HEALTH_CHECKS,
    MACHINE_POOLS,
    MACHINES,
)
from machinepool.app.components import COMPONENTS
from machinepool.bootstrap.kubeadm import KubeadmOptions
from machinepool.controllers import sharding
from machinepool.controllers.core import CoreOptions
from machinepool.providers.aws import AWSOptions
from machinepool.providers.aws import webhook as aws_webhook
from machinepool.providers.sim import SimOptions
from machinepool.runtime import (
    CacheScope,
    Client,
    ClusterCache,
    Handover,
    LeaderElectionConfig,
    Manager,
    Resource,
    SecureServing,
    ShardLabels,
    configure_logging,
    get_logger,
)
from machinepool.simworld.kubelet import KubeletOptions
from machinepool.webhooks import WebhookServer, beside, register, register_validation, serve

USER_AGENT = "machinepool-controller"


@dataclass(frozen=True)
class LeaseTiming:
    """Seconds: how long a silent holder's Lease stays valid, how long a holder keeps failing
    renewals before it gives up, and how often a candidate tries (``0 < retry < renew <
    lease``, checked by ``LeaderElectionConfig``)."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def timed(self, election: LeaderElectionConfig) -> LeaderElectionConfig:
        """``election`` with these timings."""
        return dataclasses.replace(
            election,
            lease_duration=self.lease_duration,
            renew_deadline=self.renew_deadline,
            retry_period=self.retry_period,
        )


@dataclass
class Options:
    """What one controller process runs, and how.

    ``components``: names from ``COMPONENTS`` [core, bootstrap, sim].
    ``kubeconfig``: the management cluster (``None``: in-cluster, then ``$KUBECONFIG``).
    ``leader_elect`` [True]: take the ``<name>`` Lease in ``leader_election_namespace`` first.
    ``lease_timing`` [15 s lease, 10 s renew deadline, 2 s retry period]: how every Lease the
    process takes is timed (``LeaderElectionConfig``'s fields), as upstream's
    ``--leader-elect-lease-duration``/``-renew-deadline``/``-retry-period``.
    ``metrics_bind_address`` ["127.0.0.1:8080"]: the diagnostics listener, /metrics, /healthz
    and /readyz. ``insecure_diagnostics`` [False]: serve it as plain HTTP with /metrics open to
    anyone who can connect (local runs); by default it is HTTPS and /metrics answers only
    callers the API server authenticates (TokenReview) and authorizes (SubjectAccessReview:
    ``get`` on the non-resource URL /metrics), as upstream's managers do.
    ``diagnostics_cert_dir``: ``tls.crt``/``tls.key`` for it (reloaded on change); without it a
    self-signed certificate. ``health_probe_bind_address`` [none]: a separate plain-HTTP
    listener for /healthz and /readyz only, for the kubelet's probes.
    ``webhook_port``: serve admission and conversion webhooks on ``webhook_host`` [127.0.0.1]
    there; ``None``: off. ``webhook_cert_file``/``webhook_key_file``: the serving certificate
    (for example mounted from a cert-manager Secret); without them a self-signed one is made.
    ``register_webhooks``: point the webhook configurations and CRD conversion at that server
    (local runs; a cluster install uses the manifests in deploy/ instead).
    ``feature_gates`` ["MachinePool=true"]; ``EXP_MACHINE_POOL`` overrides when set.
    ``watch_filter`` [none]: reconcile (and cache) only Cluster API objects labelled
    ``cluster.x-k8s.io/watch-filter=<value>``; without it, every object, as upstream.
    ``namespaces`` [all]: watch (and need RBAC in) only these namespaces.
    ``sharding`` [False]: this process is one replica of a sharded manager named ``name``
    (docs/operator-guide.md): it holds the shard Lease ``<name>-<shard_name>`` and reconciles
    only objects labelled with its shard; the replica holding the ``<name>`` Lease assigns
    Clusters to shards. ``shard_name`` [hostname and a random suffix]: this replica's shard.
    ``core``, ``bootstrap``, ``sim``, ``kubelet``, ``aws``: each component's own options
    (``components.FLAGS``), used when it runs. ``core.beside_upstream`` also concerns the
    process: at start it takes MachinePool admission and conversion over from upstream
    (``webhooks.beside``; refused while upstream's MachinePool gate is on); see
    docs/operator-guide.md "Beside upstream Cluster API".
    """

    components: tuple[str, ...] = ("core", "bootstrap", "sim")
    kubeconfig: Path | None = None
    context: str | None = None
    name: str = "machinepool-controller"
    leader_elect: bool = True
    leader_election_namespace: str = "kube-system"
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    metrics_bind_address: str = "127.0.0.1:8080"
    insecure_diagnostics: bool = False
    diagnostics_cert_dir: Path | None = None
    health_probe_bind_address: str = ""
    webhook_port: int | None = None
    webhook_host: str = "127.0.0.1"
    webhook_cert_file: Path | None = None
    webhook_key_file: Path | None = None
    register_webhooks: bool = False
    feature_gates: str = ""
    watch_filter: str | None = None
    namespaces: tuple[str, ...] = ()
    sharding: bool = False
    shard_name: str | None = None
    log_format: str = "text"
    log_level: str = "INFO"
    core: CoreOptions = field(default_factory=CoreOptions)
    bootstrap: KubeadmOptions = field(default_factory=KubeadmOptions)
    sim: SimOptions = field(default_factory=SimOptions)
    kubelet: KubeletOptions = field(default_factory=KubeletOptions)
    aws: AWSOptions = field(default_factory=AWSOptions)


async def _client(options: Options) -> Client:
    if options.kubeconfig is not None:
        return await Client.from_kubeconfig(
            options.kubeconfig, context=options.context, user_agent=USER_AGENT
        )
    try:
        return await Client.in_cluster(user_agent=USER_AGENT)
    except Exception:  # not in a pod: fall back to $KUBECONFIG / ~/.kube/config
        return await Client.from_kubeconfig(context=options.context, user_agent=USER_AGENT)


def _default_shard_name() -> str:
    """``<hostname>-<5 hex>``, as a label value: a pod name is unique, a restart is a new shard."""
    host = re.sub(r"[^a-z0-9-]", "-", socket.gethostname().lower()).strip("-")[:50] or "shard"
    return f"{host}-{uuid.uuid4().hex[:5]}"


SHARDED_KINDS: dict[str, tuple[Resource, ...]] = {
    # MachineHealthChecks by shard too: a replica judges only the Machines of its shard, so it
    # must hold only the health checks of those Clusters (the defaulting webhook labels them
    # with their cluster name, which the assigner reads).
    "core": (MACHINE_POOLS, MACHINES, MACHINE_HEALTH_CHECKS),
    "bootstrap": (KUBEADM_CONFIGS,),
    "sim": (SIM_MACHINE_POOLS, SIM_MACHINES),
    "aws": (AWSMACHINEPOOLS, AWSMACHINES),
    "kubelet": (),
}
"""Component -> the kinds its controllers reconcile: what a sharded manager running it caches
by shard (and its assigner labels). Other Cluster API kinds it reads (a MachinePool's bootstrap
config, say, for a core-only Deployment) stay in an unfiltered cache: another ring labels
them, or nobody does."""


def _sharded_kinds(options: Options) -> frozenset[Resource]:
    kinds = frozenset(k for name in options.components for k in SHARDED_KINDS.get(name, ()))
    if options.core.beside_upstream:  # upstream's MachineHealthChecks: neither cached nor labelled
        kinds -= {MACHINE_HEALTH_CHECKS}
    return kinds


def _watch_filtered(resource: Resource) -> bool:
    """Kinds of the Cluster API groups (core, bootstrap, infrastructure, control plane) but
    Cluster and MachineDrainRule. Not Cluster: a pool's reconcile reads its Cluster as
    upstream's does, from a cache that the watch filter does not narrow, so a user who labels
    the pool and its templates but not the Cluster still gets a working pool (Clusters are
    few, so caching all of them is cheap).
    Nor MachineDrainRule: upstream's drain follows every rule of the Machine's namespace,
    labelled or not."""
    in_group = resource.group == c.CLUSTER_GROUP or resource.group.endswith("." + c.CLUSTER_GROUP)
    return in_group and resource.kind not in ("Cluster", "MachineDrainRule")


def cache_scope(options: Options) -> CacheScope:
    """What the management cluster's informers hold under ``--namespace``/``--watch-filter``.

    The watch filter narrows only the Cluster API kinds, the objects a user labels; sharding
    only the kinds this process reconciles, which its ring's assigner labels. Secrets and
    Nodes are found by name or their own selectors.
    """
    if options.sharding:
        shard = f"{c.shard_label(options.name)}={options.shard_name}"
        return CacheScope(options.namespaces, shard, _sharded_kinds(options).__contains__)
    watch = f"{c.WATCH_FILTER_LABEL}={options.watch_filter}" if options.watch_filter else None
    return CacheScope(options.namespaces, watch, _watch_filtered)


def _election(options: Options) -> LeaderElectionConfig | None:
    """The manager's Lease: the shared one, or in a sharded manager this replica's own."""
    if options.sharding:
        assert options.shard_name, "build() names the shard"
        return options.lease_timing.timed(
            LeaderElectionConfig(
                name=f"{options.name}-{options.shard_name}",
                namespace=options.leader_election_namespace,
                identity=options.shard_name,
                labels={c.SHARD_RING_LABEL: options.name},
            )
        )
    if options.leader_elect:
        return options.lease_timing.timed(
            LeaderElectionConfig(name=options.name, namespace=options.leader_election_namespace)
        )
    return None


def _shard_labels(options: Options) -> ShardLabels:
    return ShardLabels(c.shard_label(options.name), c.shard_drain_label(options.name))


def _manager(client: Client, options: Options) -> Manager:
    return Manager(
        client,
        name=options.name,
        leader_election=_election(options),
        bind_address=options.metrics_bind_address or None,
        secure=None
        if options.insecure_diagnostics
        else SecureServing(cert_dir=options.diagnostics_cert_dir),
        health_bind_address=options.health_probe_bind_address or None,
        scope=cache_scope(options),
        handover=Handover(client, _shard_labels(options)) if options.sharding else None,
    )


def _add_assigner(mgr: Manager, options: Options) -> None:
    """The shard assigner: it labels the Clusters and the kinds this process reconciles, and
    also reads MachinePools, through which a config or infra pool finds its Cluster."""
    assert mgr.handover is not None
    labelled = {CLUSTERS, *_sharded_kinds(options)}
    ring = sharding.RingConfig(
        election=options.lease_timing.timed(
            LeaderElectionConfig(name=options.name, namespace=options.leader_election_namespace)
        ),
        shard_selector=f"{c.SHARD_RING_LABEL}={options.name}",
        resources=tuple(sorted(labelled | {MACHINE_POOLS}, key=lambda r: (r.group, r.plural))),
        labelled=frozenset(labelled),
    )
    mgr.add_controller(sharding.Assigner(mgr.client, ring, mgr.handover, mgr.metrics))


async def build(client: Client, options: Options) -> tuple[Manager, ClusterCache]:
    """A manager with every enabled component set up on it (not started)."""
    unknown = sorted(set(options.components) - COMPONENTS.keys())
    if unknown:
        raise ValueError(
            f"unknown component(s) {', '.join(unknown)}; choose from {', '.join(COMPONENTS)}"
        )
    if options.sharding and options.watch_filter:
        raise ValueError("--sharding and --watch-filter both choose objects by label: pick one")
    if options.sharding and not options.shard_name:
        options = dataclasses.replace(options, shard_name=_default_shard_name())
    mgr = _manager(client, options)
    cache = ClusterCache(client)
    mgr.metrics.add_informer_source(cache.informer_sizes)
    gates = FeatureGates.parse(options.feature_gates)
    core = dataclasses.replace(
        options.core, pool_node_taints=gates.enabled(MACHINE_POOL_NODE_TAINTS)
    )
    for name, component in COMPONENTS.items():
        if name in options.components:
            await component.setup(mgr, cache, core if name == "core" else getattr(options, name))
    if options.sharding:
        _add_assigner(mgr, options)
    return mgr, cache


async def _webhooks(client: Client, options: Options) -> WebhookServer | None:
    """Serve (and for local runs, register) the admission and conversion webhooks."""
    if options.webhook_port is None:
        if options.core.beside_upstream:
            raise ValueError(
                "--beside-upstream needs --webhook-port: we serve MachinePool admission"
            )
        return None
    gates = FeatureGates.parse(options.feature_gates)
    aws = "aws" in options.components
    server = await serve(
        options.webhook_host,
        options.webhook_port,
        gates,
        client=client,
        cert_file=options.webhook_cert_file,
        key_file=options.webhook_key_file,
        extra_routes=[(aws_webhook.VALIDATE_PATH, aws_webhook.handle)] if aws else [],
    )
    if options.register_webhooks and not options.core.beside_upstream:  # beside: _take_over does
        await register(client, server.url, server.ca_bundle)
    if options.register_webhooks and aws:
        await register_validation(
            client,
            name=f"validation.awsmachinepool.{AWS_GROUP}",
            url=server.url + aws_webhook.VALIDATE_PATH,
            ca_bundle_pem=server.ca_bundle,
            api_group=AWS_GROUP,
            resource="awsmachinepools",
        )
    return server


async def _take_over(client: Client, options: Options, server: WebhookServer) -> None:
    """MachinePool admission and conversion moved from upstream's core to ``server``: local
    runs register it by URL; in a cluster our webhook configurations come with the manifests
    and the CRD points at our Service, its CA injected by cert-manager."""
    namespace = options.leader_election_namespace
    if options.register_webhooks:
        url, ca = server.url, server.ca_bundle
        await beside.take_over(
            client,
            namespace,
            register=lambda: register(client, url, ca, conversion=False, health_checks=False),
            conversion=beside.local_conversion(url, ca),
            annotation=None,
        )
        return
    pod_namespace = os.environ.get("POD_NAMESPACE", namespace)

    async def registered_by_manifests() -> None:
        return None

    await beside.take_over(
        client,
        namespace,
        register=registered_by_manifests,
        conversion=beside.service_conversion(pod_namespace),
        annotation=f"{pod_namespace}/{beside.SERVING_CERT}",
    )


async def run_manager(options: Options, client: Client) -> None:
    """Run the components of ``options`` until SIGTERM (or cancellation)."""
    server = await _webhooks(client, options)
    mgr, cache = await build(client, options)
    if server is not None and options.core.beside_upstream:
        # Once leading, and serving our webhooks (a probe of upstream's gate goes through them).
        mgr.before_leading(lambda: _take_over(client, options, server))
    try:
        await mgr.run()
    finally:
        await cache.stop()
        if server is not None:
            await server.stop()


async def _main(options: Options) -> None:
    client = await _client(options)
    async with client:
        await run_manager(options, client)


def run(options: Options) -> None:
    """Configure logging and run the process in a fresh event loop."""
    configure_logging(
        getattr(logging, options.log_level.upper(), logging.INFO), fmt=options.log_format
    )
    log = get_logger(__name__)
    log.info("starting", components=",".join(options.components))
    try:
        asyncio.run(_main(options))
    except beside.UpstreamStillReconciles as err:
        log.error("cannot run beside upstream Cluster API", reason=str(err))
        raise SystemExit(2) from None
