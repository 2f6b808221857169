"""The AWS provider reads from the manager's informers, not the API server, on every reconcile.

A settled pool is re-read from AWS on a timer, so its reconciles run all the time: each one
that read the AWSMachinePool, its MachinePool, its Cluster, AWSMachines or Machines live would
cost the API server a request per pool per poll. The provider runs on a client of its own here
(``counted_provider``), whose every request is counted, apart from the test's and the
stand-ins' for core and kubelet. A scale-down may list the pool's Machines live (victims are
chosen right before their Machines are deleted), and nothing else.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from machinepool.runtime import NODES

AWSEnv = Any  # the conftest's AWSEnv (test modules cannot import conftest under importlib)
FakeAWS = Any
CountedProvider = Any

RECONCILES = 6
KEPT_LIVE = {("get", "secrets")}
"""The bootstrap data Secret, read live as the pool engine reads it (see controller.py)."""


async def _settled(env: AWSEnv, name: str, count: int) -> bool:
    pool = await env.pool(name)
    live = await env.live_ids(name)
    machines = await env.aws_machines()
    nodes = (await env.workload_client.list(NODES)).items
    return bool(
        pool.get("status", {}).get("ready")
        and len(live) == count
        and pool["spec"].get("providerIDList") == live
        and len(machines) == count
        and all((m.get("status") or {}).get("ready") for m in machines)
        and len(nodes) >= count
    )


async def test_reconciles_read_from_informers_but_the_bootstrap_secret_and_victims(
    aws_env: AWSEnv, counted_provider: CountedProvider, fake_aws: FakeAWS
) -> None:
    await aws_env.create_pool("idle", 2)
    await aws_env.eventually(lambda: _settled(aws_env, "idle", 2))

    # Every reconcile of a pool that has a group describes it by name once: count reconciles
    # so (the node agent describes every group, without a name).
    def describes() -> int:
        return sum(
            1
            for _, form in fake_aws.calls("DescribeAutoScalingGroups")
            if form.get("AutoScalingGroupNames.member.1") == ["idle"]
        )

    start = describes()
    counted_provider.requests.clear()
    await aws_env.eventually(lambda: describes() - start >= RECONCILES, within=60)
    reads = Counter(
        (verb, plural)
        for verb, plural, _ in list(counted_provider.requests)
        if verb in ("get", "list")
    )
    live = {k: n for k, n in reads.items() if k not in KEPT_LIVE}
    assert not live, f"reads that informers should serve, over {RECONCILES} reconciles: {live}"
    assert reads[("get", "secrets")] >= 1, "the reconciles did not get as far as user data"

    # Scaling down: the victims' Machines are listed live (right before deleting them), and
    # the AWSMachine controller reads the deleted AWSMachine and its (deleting) owner Machine
    # from the informers.
    counted_provider.requests.clear()
    await aws_env.scale("idle", 1)
    await aws_env.eventually(lambda: _settled(aws_env, "idle", 1))
    reads = Counter(
        (verb, plural)
        for verb, plural, _ in list(counted_provider.requests)
        if verb in ("get", "list")
    )
    live = {k: n for k, n in reads.items() if k not in {*KEPT_LIVE, ("list", "machines")}}
    assert not live, f"reads that informers should serve while scaling down: {live}"
    assert reads[("list", "machines")] >= 1, "no scale-down through Machines"
