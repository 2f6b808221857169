"""The KubeadmConfig controller sees every change it reads, and keeps one token per config.

- ``test_pool_events_pass_every_pool_field_a_reconcile_reads``: real reconciles, over a pool
  that is fresh, has Nodes, and runs a version no kubeadm can join, record what they read of
  the pool (``tests.support.reads``); ``pool_inputs``, the filter of the pool watch, must
  notice a change of each of those fields, or the change would never reach the config.
- ``test_an_unsupported_version_is_retried_and_fixed_with_one_token``: a pool at v1.19.7 is
  refused with a condition naming the version, retried with backoff (no token made for it),
  and moved to v1.34.4: the config renders at once, with one token.
- ``test_a_failed_write_of_the_data_keeps_the_token_it_made``: a Secret of another kind squats
  the data Secret's name, so every pass makes the token and then fails; once it is gone the
  data carries the first token, and the config never had two.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tests.support import eventually, wait_for
from tests.support.conditions import condition
from tests.support.pools import roll_pool
from tests.support.reads import recording, unnoticed
from tests.support.resources import CLUSTERS, KUBEADM_CONFIGS, MACHINE_POOLS

from machinepool.bootstrap.kubeadm import DATA_TOKEN_ID_ANNOTATION, TOKEN_CONFIG_UID_LABEL
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.controller import KubeadmConfigReconciler, pool_inputs
from machinepool.bootstrap.kubeadm.data import RenderFailed
from machinepool.bootstrap.kubeadm.scope import KubeadmOptions
from machinepool.runtime import SECRETS, Client, ClusterCache, Manager, Obj, ObjectKey

from .conftest import Env, data_created

RunController = Callable[..., Awaitable[Manager]]


def failed_reconciles(mgr: Manager) -> float:
    return (
        mgr.metrics.registry.get_sample_value(
            "controller_runtime_reconcile_errors_total", {"controller": "kubeadmconfig"}
        )
        or 0.0
    )


async def retried_twice_more(mgr: Manager) -> None:
    """Wait for two failed reconciles after the first: the refusal is retried, not left for an
    event (the first's count may come just after its condition is written)."""
    await eventually(lambda: failed_reconciles(mgr) >= 3)


class TokenWatch:
    """Every token Secret of one config in the workload cluster, followed by a watch, and the
    most that ever existed at once."""

    def __init__(self, workload: Client, config_uid: str) -> None:
        self.workload = workload
        self.selector = f"{TOKEN_CONFIG_UID_LABEL}={config_uid}"
        self.names: set[str] = set()
        self.made: list[str] = []
        self.most = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TokenWatch:
        listed = await self.workload.list(SECRETS, "kube-system", label_selector=self.selector)
        for secret in listed.items:
            self._saw("ADDED", secret)
        self._task = asyncio.create_task(self._follow(listed.resource_version))
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def _saw(self, kind: str, secret: Obj) -> None:
        name = str(secret["metadata"]["name"])
        if kind == "DELETED":
            self.names.discard(name)
            return
        if name not in self.names and name not in self.made:
            self.made.append(name)
        self.names.add(name)
        self.most = max(self.most, len(self.names))

    async def _follow(self, version: str) -> None:
        async for event in self.workload.watch(
            SECRETS, "kube-system", resource_version=version, label_selector=self.selector
        ):
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                self._saw(event.type, event.object)


async def test_pool_events_pass_every_pool_field_a_reconcile_reads(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    env = bootstrap_env
    pool = await env.create_pool("inputs", "inputs", version="v1.34.4")
    await env.create_config("inputs", {}, pool=pool)
    mgr = await run_controller()
    await env.wait_config("inputs", data_created)
    pools = await mgr.cache.get_informer(MACHINE_POOLS)
    cache = ClusterCache(env.client, probe_interval=5.0)
    reconciler = KubeadmConfigReconciler(
        mgr,
        cache,
        await mgr.cache.get_informer(KUBEADM_CONFIGS),
        KubeadmOptions(),
        mgr.event_recorder(r.COMPONENT),
        machine_pools=pools,
        clusters=await mgr.cache.get_informer(CLUSTERS),
    )
    key = ObjectKey(env.namespace, "inputs")
    reads: set[tuple[str, ...]] = set()
    states: list[Obj] = []

    async def reconcile_recorded(settled: Callable[[Obj], bool]) -> None:
        await eventually(lambda: settled(pools.get("inputs", env.namespace) or {}))
        states.append(pools.get("inputs", env.namespace) or {})
        with recording(pools, key) as read, contextlib.suppress(RenderFailed):
            await reconciler.reconcile(key)  # the refused version raises: its reads count
        reads.update(read)

    try:
        await reconcile_recorded(lambda p: True)  # fresh: the token is refreshed
        status = {"status": {"nodeRefs": [{"name": "node-1"}], "replicas": 1}}
        await env.client.patch(MACHINE_POOLS, "inputs", status, env.namespace, subresource="status")
        await reconcile_recorded(lambda p: bool(p.get("status", {}).get("nodeRefs")))
        await roll_pool(env.client, env.namespace, "inputs", "v1.19.7")
        await reconcile_recorded(
            lambda p: p["spec"]["template"]["spec"].get("version") == "v1.19.7"
        )
    finally:
        await cache.stop()
    assert ("spec", "template", "spec", "version") in reads
    for state in states:
        assert unnoticed(pool_inputs, state, reads) == set()


async def test_an_unsupported_version_is_retried_and_fixed_with_one_token(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    env = bootstrap_env
    pool = await env.create_pool("old", "old", version="v1.19.7")
    config = await env.create_config("old", {}, pool=pool)
    async with TokenWatch(env.workload_client, config["metadata"]["uid"]) as tokens:
        mgr = await run_controller()
        refused = await env.wait_config(
            "old",
            lambda o: "v1.19.7" in condition(o, "DataSecretAvailable").get("message", ""),
        )
        cond = condition(refused, "DataSecretAvailable")
        assert (cond["status"], cond["reason"]) == ("False", "DataSecretGenerationFailed")
        assert "use v1.22 or later" in cond["message"]
        await retried_twice_more(mgr)
        assert tokens.made == [], "no token is made for a config that cannot render"

        await roll_pool(env.client, env.namespace, "old", "v1.34.4")
        fixed = await env.wait_config("old", data_created, within=15)
        assert condition(fixed, "DataSecretAvailable")["status"] == "True"
        secret = await env.client.get(SECRETS, "old", env.namespace)
        token_id = secret["metadata"]["annotations"][DATA_TOKEN_ID_ANNOTATION]
        await eventually(lambda: tokens.names == {f"bootstrap-token-{token_id}"})
    assert tokens.most == 1


async def test_a_failed_write_of_the_data_keeps_the_token_it_made(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    env = bootstrap_env
    squatter = {"metadata": {"name": "squat"}, "type": "Opaque", "data": {"x": "eA=="}}
    await env.client.create(SECRETS, squatter, env.namespace)
    pool = await env.create_pool("squat", "squat", version="v1.34.4")
    config = await env.create_config("squat", {}, pool=pool)
    async with TokenWatch(env.workload_client, config["metadata"]["uid"]) as tokens:
        mgr = await run_controller()
        await env.wait_config(
            "squat",
            lambda o: (
                "is not a cluster.x-k8s.io/secret"
                in condition(o, "DataSecretAvailable").get("message", "")
            ),
        )
        await retried_twice_more(mgr)
        assert len(tokens.made) == 1, "every failed pass took the token the first one made"
        await env.client.delete(SECRETS, "squat", env.namespace)
        await wait_for(env.client, KUBEADM_CONFIGS, env.namespace, "squat", data_created)
        secret = await env.client.get(SECRETS, "squat", env.namespace)
        token_id = secret["metadata"]["annotations"][DATA_TOKEN_ID_ANNOTATION]
        assert tokens.made == [f"bootstrap-token-{token_id}"]
    assert tokens.most == 1
