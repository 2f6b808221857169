"""Faults at scale: pools rolled to a new version while everything pushes back at once.

``--fault-pools`` x ``--fault-pool-size`` (CI size 4 x 10; by hand, full size:
``pytest tests/reliability/test_scale_faults.py --fault-pools=20 --fault-pool-size=50``)
MachinePools are created and then all rolled to a new version while

(a) the controller process (core, bootstrap, sim) is SIGKILLed every few seconds;
(b) etcd is compacted every few seconds, the management apiserver serves watches from etcd
    (no watch cache), and the proxy in front of the controller drops its open watches now
    and then, so resumed watches meet compacted resourceVersions (410 Gone, re-list);
(c) the management apiserver runs with ``--max-requests-inflight=3`` (no priority and
    fairness), so the controller's requests get 429s; the controller runs as a
    ServiceAccount (cluster-admin, but not system:masters, which is exempt from the limit);
(d) the workload cluster's apiserver restarts.

Afterwards: exactly the desired instances, one Machine and one Ready Node per instance,
nothing orphaned (``check_converged`` per pool), only old-version Nodes deleted, Ready never
below ``replicas - maxUnavailable`` (0) in any pool while the controller was up, no retry
storm (failure streaks held to the backoff, plus one immediate retry per pool member, which
others' changes may cause), and the controller's request rate, audited by
the proxy it talks through, bounded: no 10-second window holds more than
``REQUESTS_PER_NODE_PER_10S`` per Node plus ``REQUEST_BASE``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio
import yaml
from tests.reliability.harness import (
    ControllerProcess,
    Env,
    World,
    check_pools_converged,
    failure_streaks,
    judge_victims,
    private_env,
    storms,
)
from tests.reliability.proxy import AuditProxy, Request
from tests.reliability.report import Recorder
from tests.support.builders import VERSION, create_pool
from tests.support.pools import roll_pool
from tests.support.resources import CLUSTER_ROLE_BINDINGS

from machinepool.controlplane import ControlPlane
from machinepool.runtime import CORE_EVENTS, SERVICE_ACCOUNTS, Client, FuncHandler

NEW_VERSION = "v1.34.1"
KILL_EVERY = (3.0, 6.0)
"""Seconds between SIGKILLs of the controller, once it is ready again."""
COMPACT_EVERY = 3.0
DROP_WATCHES_EVERY = 10.0
MANAGEMENT_ARGS = (
    # (c) shed load: at most 3 reads and 2 writes in flight, then 429 (APF would queue).
    "--enable-priority-and-fairness=false",
    "--max-requests-inflight=3",
    "--max-mutating-requests-inflight=2",
    # (b) watches straight from etcd: a watch resumed after a compaction gets 410 Gone
    # (the watch cache would serve it from its window of recent events instead).
    "--watch-cache=false",
)
REQUEST_BASE = 400
REQUESTS_PER_NODE_PER_10S = 40


@pytest_asyncio.fixture(loop_scope="session")
async def pushy_env(tmp_path: Path, logs: Path) -> AsyncIterator[tuple[ControlPlane, Env]]:
    """A private control plane whose management apiserver sheds load with 429s."""
    async with private_env(tmp_path, logs, "scale", management_args=MANAGEMENT_ARGS) as made:
        yield made


async def _service_account_kubeconfig(
    client: Client, cp: ControlPlane, proxy: AuditProxy, path: Path
) -> Path:
    """A cluster-admin ServiceAccount's token, reaching the apiserver through ``proxy``."""
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "scale"}}, "default")
    binding = {
        "metadata": {"name": "scale-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "scale", "namespace": "default"}],
    }  # fmt: skip
    await client.create(CLUSTER_ROLE_BINDINGS, binding)
    answer = await client.request(
        "POST",
        SERVICE_ACCOUNTS.path("default", "scale") + "/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 7200}},
    )  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "p", "cluster": {"server": f"http://127.0.0.1:{proxy.port}"}}],
        "users": [{"name": "scale", "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": "p", "context": {"cluster": "p", "user": "scale"}}],
        "current-context": "p",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


async def _compact_forever(etcd_url: str, counter: list[int]) -> None:
    """Compact etcd to its current revision every few seconds (the v3 JSON gateway)."""
    async with aiohttp.ClientSession() as http:
        while True:
            await asyncio.sleep(COMPACT_EVERY)
            with contextlib.suppress(aiohttp.ClientError, KeyError, ValueError):
                key = base64.b64encode(b"/").decode()
                async with http.post(f"{etcd_url}/v3/kv/range", json={"key": key}) as resp:
                    revision = int((await resp.json())["header"]["revision"])
                async with http.post(
                    f"{etcd_url}/v3/kv/compaction", json={"revision": revision}
                ) as resp:
                    if resp.status == 200:
                        counter[0] += 1


async def _drop_watches_forever(proxy: AuditProxy, counter: list[int]) -> None:
    while True:
        await asyncio.sleep(DROP_WATCHES_EVERY)
        proxy.partition()  # open streams (watches) break; the controller resumes them
        proxy.heal()
        counter[0] += 1


async def _kill_forever(proc: ControllerProcess, rng: random.Random) -> None:
    while True:
        await proc.wait_ready(timeout=300)
        await asyncio.sleep(rng.uniform(*KILL_EVERY))
        proc.crash_and_restart()


def _progress(world: World, want: dict[str, int]) -> str:
    """One line per pool not yet Running on the new version: its live instances and Machines
    by version, and Ready Nodes. What the full-size run is read by while it goes."""
    machines = {str(m["metadata"]["name"]): m for m in world.objects("machines")}
    ready = {str(n["spec"].get("providerID", "")) for n in world.ready_nodes()}
    lines = []
    for pool, replicas in want.items():
        if world.pool_running(pool, replicas, NEW_VERSION):
            continue
        count: dict[str, int] = dict.fromkeys(
            ("old", "new", "old deleting", "new deleting", "old Ready", "new Ready"), 0
        )
        for record in world.live(pool):
            age = "new" if record.version == NEW_VERSION else "old"
            count[age] += 1
            if "deletionTimestamp" in (machines.get(record.id) or {}).get("metadata", {}):
                count[f"{age} deleting"] += 1
            if record.provider_id in ready:
                count[f"{age} Ready"] += 1
        lines.append(f"  {pool}: " + ", ".join(f"{k} {v}" for k, v in count.items()))
    return f"{time.strftime('%H:%M:%S')} live instances of pools not done:\n" + "\n".join(lines)


async def _until_or_say_why(
    world: World,
    check: Callable[[], bool],
    what: str,
    want: dict[str, int],
    *,
    timeout: float,
) -> None:
    """``world.until``, saying every minute where the pools not done stand; on a timeout the
    failure also says what was still wrong (the first problems ``check_pools_converged``
    finds), since the processes are gone by the time anyone reads it."""

    async def say_progress() -> None:
        while True:
            await asyncio.sleep(60)
            print(_progress(world, want), flush=True)

    progress = asyncio.create_task(say_progress())
    try:
        await world.until(check, what, timeout=timeout)
    except AssertionError as exc:
        problems = check_pools_converged(world, want, NEW_VERSION)
        raise AssertionError(f"{exc}; still wrong: {problems[:10]}") from None
    finally:
        progress.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await progress


async def _deletions_said(env: Env) -> list[str]:
    """What the pools' Events said of the Machines they deleted and why: where a wrong
    deletion is first looked for when the test fails."""
    events = await env.client.list(CORE_EVENTS, env.namespace)
    said = sorted(
        (str(e.get("lastTimestamp") or e.get("eventTime") or ""), str(e.get("message")))
        for e in events.items
        if e.get("reason") in ("SuccessfulDelete", "SuccessfulCreate")
    )
    return [f"{at} {message}" for at, message in said]


async def _scale_downs(env: Env) -> list[str]:
    """Machines a pool said it deleted to scale down. The replicas never change in this test,
    so each is a plan made from a view that did not show the pool's own last step (an
    instance counted twice, a deleted Machine counted as serving) and took a young instance
    for surplus."""
    events = await env.client.list(CORE_EVENTS, env.namespace)
    return sorted(
        f"{(e.get('involvedObject') or {}).get('name')}: {e.get('message')}"
        for e in events.items
        if e.get("reason") == "SuccessfulDelete" and "(scale down to" in str(e.get("message"))
    )


def _peak_requests(log: list[Request], window: float = 10.0) -> int:
    starts = sorted(r.started for r in log)
    peak, lo = 0, 0
    for hi, at in enumerate(starts):
        while starts[lo] < at - window:
            lo += 1
        peak = max(peak, hi - lo + 1)
    return peak


async def test_rollout_at_scale_under_kills_compaction_throttling_and_restarts(
    pushy_env: tuple[ControlPlane, Env],
    fault_pools: int,
    fault_pool_size: int,
    tmp_path: Path,
    report: Recorder,
) -> None:
    cp, env = pushy_env
    world, rng = env.world, random.Random(26)
    audit: list[Request] = []
    tls = ssl.create_default_context(cafile=str(cp.management.pki.ca_crt))  # no client cert
    proxy = AuditProxy("scale", cp.url, tls, audit)
    await proxy.start()
    kubeconfig = await _service_account_kubeconfig(
        env.client, cp, proxy, tmp_path / "scale.kubeconfig"
    )
    controller = env.spawn(
        "controller", "core,bootstrap,sim", kubeconfig=kubeconfig,
        extra_args=("--log-format", "json"), warm_restarts=True,
    )  # fmt: skip
    kubelet = env.spawn("kubelet", "kubelet")
    pools = [f"p{i}" for i in range(fault_pools)]
    replicas = fault_pool_size
    nodes = fault_pools * replicas
    floor_dips: list[str] = []

    def sample(*_: Any) -> None:
        at = time.monotonic()
        if controller.was_down(at):
            return
        ready: dict[str, int] = dict.fromkeys(pools, 0)
        for node in world.ready_nodes():
            pool = world.pool_of(node)
            if pool in ready:
                ready[pool] += 1
        floor_dips.extend(f"{p}: Ready {n} < {replicas}" for p, n in ready.items() if n < replicas)

    background: list[asyncio.Task[None]] = []
    compactions, drops = [0], [0]
    try:
        await controller.wait_ready(timeout=300)
        await kubelet.wait_ready()
        sim = {"template": {"instanceType": "sim.small"}, "sim": {"bootDelaySeconds": 1}}
        for pool in pools:
            await create_pool(env.client, env.namespace, pool, replicas=replicas, sim_spec=sim)
        await world.until(
            lambda: all(world.pool_running(p, replicas, VERSION) for p in pools),
            f"{nodes} Ready before the rollout",
            timeout=900,
        )
        deleted_before = len(world.deleted_nodes)
        world.informers["nodes"].add_handler(FuncHandler(None, sample, None))
        started = time.monotonic()
        background = [
            asyncio.create_task(_kill_forever(controller, rng)),
            asyncio.create_task(_compact_forever(cp.etcd_url, compactions)),
            asyncio.create_task(_drop_watches_forever(proxy, drops)),
        ]
        for pool in pools:
            await roll_pool(env.client, env.namespace, pool, NEW_VERSION)
        await world.until(
            lambda: len(world.ready_nodes(NEW_VERSION)) >= nodes // 2,
            "half the Nodes on the new version",
            timeout=900,
        )
        workload = cp.workloads["scale"]
        await asyncio.to_thread(workload.restart_apiserver)
        await _until_or_say_why(
            world,
            lambda: all(world.pool_running(p, replicas, NEW_VERSION) for p in pools),
            f"{nodes} Ready on {NEW_VERSION} under faults",
            dict.fromkeys(pools, replicas),
            timeout=1800,
        )
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        background = []
        await controller.wait_ready(timeout=300)
        want = dict.fromkeys(pools, replicas)
        await _until_or_say_why(
            world,
            lambda: not check_pools_converged(world, want, NEW_VERSION),
            "every pool converged with nothing lost",
            want,
            timeout=600,
        )
        elapsed = time.monotonic() - started
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        env.close()  # the controllers first: without the proxy they could only fail
        await proxy.stop()

    problems = check_pools_converged(world, dict.fromkeys(pools, replicas), NEW_VERSION)
    deleted = world.deleted_nodes[deleted_before:]
    problems += judge_victims(deleted, old_version=VERSION, max_deleted=nodes)
    problems += sorted(set(floor_dips))[:10]
    scale_downs = await _scale_downs(env)
    problems += scale_downs[:10]
    logs = "".join(p.log.read_text(errors="replace") for p in (controller, kubelet))
    gone = len(re.findall(r"resourceVersion too old; re-listing", logs))
    throttled = sum(1 for r in audit if r.status == 429)
    peak = _peak_requests(audit)
    bound = REQUEST_BASE + REQUESTS_PER_NODE_PER_10S * nodes
    print(
        f"\nscale faults: {fault_pools} pools x {replicas} rolled in {elapsed:.0f}s;"
        f" {controller.kills} SIGKILLs, {compactions[0]} compactions, {drops[0]} watch drops,"
        f" 1 workload apiserver restart; 410s re-listed {gone}, 429s {throttled},"
        f" requests {len(audit)} (peak {peak} per 10 s, bound {bound});"
        f" surplus deletions {len(scale_downs)}"
    )
    report.record("pools x replicas rolled", f"{fault_pools} x {replicas}")
    report.record("rollout wall time, s", elapsed)
    report.record("SIGKILLs", controller.kills)
    report.record("etcd compactions", compactions[0])
    report.record("watch drops", drops[0])
    report.record("workload apiserver restarts", 1)
    report.record("410s re-listed", gone)
    report.record("429s seen", throttled)
    report.record("Machines deleted as surplus", len(scale_downs))
    report.record("requests audited (peak per 10 s / bound)", f"{len(audit)} ({peak} / {bound})")
    assert problems == [], problems + await _deletions_said(env)
    # A failing pool is re-queued at once by each change of its members (Machines, SimMachines,
    # Nodes: other controllers' and the kubelet's writes), as in client-go; its own writes
    # no longer do. So a streak may exceed its backoff by about one event per member.
    assert storms(failure_streaks(controller.log), slack=replicas) == []
    assert controller.kills >= 1
    assert throttled > 0, "the low inflight limit should have pushed back with 429s"
    assert gone > 0, "watches should have been resumed from expired resourceVersions"
    assert peak <= bound, f"request rate: {peak} requests in 10 s > {bound}"
    assert await env.secret_findings() == []
