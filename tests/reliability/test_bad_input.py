"""Bad input: a barrage of hypothesis-generated MachinePools and SimMachinePools, valid and
invalid, created through the apiserver with the admission webhooks registered.

Every input carries what the generator knows about it: the fields it broke on purpose. The
apiserver (schema) or the webhook must reject those, and the refusal must name one of the
broken fields; inputs with no broken field must be accepted and then reconciled (the
controller adds its finalizer; an infra pool's conditions explain what it makes of its spec).
Meanwhile a canary pool keeps scaling up and down, and the controller process must neither
exit nor log a traceback.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tests.reliability.harness import ControllerProcess, Env
from tests.reliability.report import Recorder
from tests.support.builders import CLUSTER, VERSION, create_pool, machine_pool
from tests.support.pools import scale_pool
from tests.support.resources import MACHINE_POOLS, SIM_MACHINE_POOLS
from tests.support.waiting import until_admission_answers

from machinepool.api import constants as c
from machinepool.api.features import FeatureGates
from machinepool.api.infra_sim import SIM_INSTANCE_TYPES
from machinepool.runtime import ApiError, Client, Resource, ServerError, TooManyRequests
from machinepool.webhooks import WebhookServer, register, serve, unregister

BARRAGE_LABEL = "reliability.machinepool.test/barrage"
CONFIG_NAME = "reliability-barrage"
MACHINE_POOLS_PER_SCALE = 600
INFRA_POOLS_PER_SCALE = 400
BATCH = 100
_ids = itertools.count()


@dataclass
class Case:
    """One generated input: what to create, and which fields it broke on purpose."""

    kind: str
    body: dict[str, Any]
    broken: list[str] = field(default_factory=list)
    """Field paths that make the input invalid; a refusal must name one of them."""
    maybe: list[str] = field(default_factory=list)
    """Fields whose validity the generator does not decide; a refusal must name one."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


# -- generators ---------------------------------------------------------------------------


def _rarely(draw: st.DrawFn, odds: int) -> bool:
    """True about once in ``odds + 1`` draws (plain integer draws lean on their bounds)."""
    return bool(draw(st.sampled_from([False] * odds + [True])))


_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)
_dns = st.from_regex(r"\A[a-z]([-a-z0-9]{0,12}[a-z0-9])?\Z")


@st.composite
def machine_pools(draw: st.DrawFn) -> Case:
    name = f"mp-{next(_ids)}-{draw(_dns)}"[:63].rstrip("-")
    case = Case("MachinePool", {})
    meta: dict[str, Any] = {"name": name, "labels": {BARRAGE_LABEL: "true"}}
    if _rarely(draw, 19):
        meta["name"] = name.upper()
        case.broken.append("metadata.name")
    cluster = draw(st.sampled_from([CLUSTER] * 6 + ["other", "", "x" * 64]))
    if cluster == "" or len(cluster) > 63:
        case.broken.append("spec.clusterName")
    template_cluster = cluster
    if _rarely(draw, 9):
        template_cluster = cluster + "-mismatch"
        case.broken.append("spec.template.spec.clusterName")
    tspec: dict[str, Any] = {"clusterName": template_cluster}
    version = draw(
        st.sampled_from([VERSION] * 4 + ["1.34.0", "v1.34.1-rc.0+build.5", "v1.34", "latest", None])
    )
    if version is not None:
        tspec["version"] = version
        if version in ("v1.34", "latest"):
            case.broken.append("spec.template.spec.version")
    bootstrap = draw(st.sampled_from(["configRef"] * 4 + ["dataSecretName"] * 3 + ["none"]))
    if bootstrap == "configRef":
        ref = {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": name}
        tspec["bootstrap"] = {"configRef": ref}
    elif bootstrap == "dataSecretName":
        tspec["bootstrap"] = {"dataSecretName": f"{name}-data"}
    else:
        tspec["bootstrap"] = {}
        case.broken.append("spec.template.spec.bootstrap")
    tspec["infrastructureRef"] = {
        "apiGroup": "infrastructure.cluster.x-k8s.io",
        "kind": draw(st.sampled_from(["SimMachinePool", "AWSMachinePool"])),
        "name": name,
    }
    if _rarely(draw, 7):
        tspec["taints"] = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
        case.broken.append("spec.template.spec.taints")
    if _rarely(draw, 4):
        tspec["minReadySeconds"] = draw(st.integers(-3, 600))
        if tspec["minReadySeconds"] < 0:
            case.broken.append("spec.template.spec.minReadySeconds")
    if _rarely(draw, 4):
        timeout = draw(st.integers(-3, 30))
        tspec["deletion"] = {"nodeDeletionTimeoutSeconds": timeout}
        if timeout < 0:
            case.broken.append("spec.template.spec.deletion.nodeDeletionTimeoutSeconds")
    template: dict[str, Any] = {"spec": tspec}
    if _rarely(draw, 3):
        key = draw(st.one_of(st.sampled_from(["team", "example.com/tier"]), _text))
        template["metadata"] = {"labels": {key: "x"}}
        if key not in ("team", "example.com/tier"):
            case.maybe.append("spec.template.metadata.labels")
    spec: dict[str, Any] = {"clusterName": cluster, "template": template}
    replicas = draw(st.one_of(st.none(), st.integers(-2, 2), st.just(2**31)))
    if replicas is not None:
        spec["replicas"] = replicas
        if replicas < 0:
            case.broken.append("spec.replicas")
        elif replicas >= 2**31:
            case.maybe.append("spec.replicas")
    if _rarely(draw, 5):
        low, high = draw(st.integers(-1, 3)), draw(st.one_of(st.integers(-1, 5), _text))
        meta["annotations"] = {
            c.AUTOSCALER_MIN_SIZE_ANNOTATION: str(low),
            c.AUTOSCALER_MAX_SIZE_ANNOTATION: str(high),
        }
        # Upstream's message names the annotation (strconv's error), not the path; a
        # negative minimum becomes a negative spec.replicas on create.
        case.maybe += [
            "spec.replicas",
            "metadata.annotations",
            c.AUTOSCALER_MIN_SIZE_ANNOTATION,
            c.AUTOSCALER_MAX_SIZE_ANNOTATION,
        ]
    if _rarely(draw, 5):
        spec["failureDomains"] = draw(st.lists(_text, max_size=3))
        case.maybe.append("spec.failureDomains")
    case.body = {
        "apiVersion": MACHINE_POOLS.api_version,
        "kind": "MachinePool",
        "metadata": meta,
        "spec": spec,
    }
    return case


_int_or_percent = st.one_of(
    st.integers(-2, 4), st.sampled_from(["0%", "25%", "150%", "abc", "%", "-5%", ""])
)


@st.composite
def infra_pools(draw: st.DrawFn) -> Case:
    name = f"ip-{next(_ids)}-{draw(_dns)}"[:63].rstrip("-")
    case = Case("SimMachinePool", {})
    spec: dict[str, Any] = {}
    instance_type = draw(
        st.sampled_from(["sim.small", "sim.large", "sim.medium", "sim.small", "small", "x" * 300])
    )
    spec["template"] = {"instanceType": instance_type}
    if instance_type not in SIM_INSTANCE_TYPES:
        case.broken.append("spec.template.instanceType")
    if _rarely(draw, 1):
        strategy: dict[str, Any] = {
            "type": draw(st.sampled_from(["RollingUpdate"] * 4 + ["Recreate"])),
            "rollingUpdate": {
                "maxSurge": draw(_int_or_percent),
                "maxUnavailable": draw(_int_or_percent),
                "deletePolicy": draw(
                    st.sampled_from(["Oldest", "Newest", "Random", "Oldest", "Nope"])
                ),
            },
        }
        if strategy["type"] != "RollingUpdate":
            case.broken.append("spec.strategy.type")
        if strategy["rollingUpdate"]["deletePolicy"] == "Nope":
            case.broken.append("spec.strategy.rollingUpdate.deletePolicy")
        spec["strategy"] = strategy
    if _rarely(draw, 1):
        sim = {
            "bootDelaySeconds": draw(st.sampled_from([0, 1, 5, 0, -2])),
            "bootFailureRate": draw(st.sampled_from([0.0, 0.2, 0.5, 1.0, 0.0, -0.1, 1.5])),
            "capacityPerFailureDomain": draw(st.sampled_from([0, 1, 3, 0, -1])),
        }
        for key in ("bootDelaySeconds", "bootFailureRate", "capacityPerFailureDomain"):
            if sim[key] < 0 or (key == "bootFailureRate" and sim[key] > 1):
                case.broken.append(f"spec.sim.{key}")
        spec["sim"] = sim
    if _rarely(draw, 5):
        spec["providerIDList"] = [""]
        case.broken.append("spec.providerIDList")
    case.body = {
        "apiVersion": SIM_MACHINE_POOLS.api_version,
        "kind": "SimMachinePool",
        "metadata": {"name": name, "labels": {BARRAGE_LABEL: "true"}},
        "spec": spec,
    }
    return case


def generate(strategy: st.SearchStrategy[Case], count: int) -> list[Case]:
    """``count`` examples of ``strategy`` (generation only: no shrinking, no database)."""
    cases: list[Case] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case: Case) -> None:
        cases.append(case)

    collect()
    return cases


# -- the barrage ------------------------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def webhooks(client: Client) -> AsyncIterator[WebhookServer]:
    """Our admission webhooks, registered only for MachinePools labelled for the barrage."""
    server = await serve(port=0, gates=FeatureGates.parse("MachinePool=true"), client=client)
    await register(
        client,
        server.url,
        server.ca_bundle,
        config_name=CONFIG_NAME,
        object_selector={BARRAGE_LABEL: "true"},
        conversion=False,
    )
    try:
        yield server
    finally:
        await unregister(client, config_name=CONFIG_NAME)
        await server.stop()


async def _wait_effective(client: Client, namespace: str) -> None:
    probe = machine_pool(
        namespace, "probe", replicas=1, version="bad", labels={BARRAGE_LABEL: "true"}
    )
    await until_admission_answers(client, MACHINE_POOLS, probe, namespace)


BUG_TYPES = re.compile(
    r"^(?:[\w.]+\.)?(TypeError|KeyError|AttributeError|IndexError|ValueError|AssertionError|"
    r"ZeroDivisionError|ValidationError|UnboundLocalError|NameError|RecursionError)\b.*$",
    re.MULTILINE,
)


def programming_errors(log: str) -> list[str]:
    """Exceptions in a controller log that mean a reconcile hit a bug, not a bad object:
    handled errors (API errors, missing references) are logged too, but never as these."""
    return sorted({m.group(0) for m in BUG_TYPES.finditer(log)})


@dataclass
class Tally:
    tried: int = 0
    rejected: int = 0
    accepted: int = 0
    problems: list[str] = field(default_factory=list)


async def _submit(client: Client, namespace: str, case: Case, tally: Tally) -> bool:
    """Create one input; judge the answer. True when it was accepted."""
    res = MACHINE_POOLS if case.kind == "MachinePool" else SIM_MACHINE_POOLS
    tally.tried += 1
    try:
        await _create(client, res, case.body, namespace)
    except ApiError as err:
        tally.rejected += 1
        named = case.broken + case.maybe
        if not named:
            tally.problems.append(f"valid {case.kind} {case.name} rejected: {err.message}")
        elif not any(path in err.message for path in named):
            tally.problems.append(
                f"{case.kind} {case.name} rejected without naming {named}: {err.message}"
            )
        return False
    tally.accepted += 1
    if case.broken:
        tally.problems.append(f"{case.kind} {case.name} accepted despite {case.broken}")
    return True


async def _create(client: Client, res: Resource, body: dict[str, Any], namespace: str) -> None:
    """Create, retrying answers that say nothing about the input (overload, timeouts)."""
    for attempt in range(5):
        try:
            await client.create(res, body, namespace)
            return
        except (ServerError, TooManyRequests) as err:
            if attempt == 4:
                raise
            await asyncio.sleep(0.5 * (attempt + 1))
            del err


def _reconciled(env: Env, case: Case) -> bool:
    kind = "machinepools" if case.kind == "MachinePool" else "simmachinepools"
    obj = env.world.get(kind, case.name)
    if obj is None:
        return False
    finalizers = obj["metadata"].get("finalizers") or []
    if case.kind == "MachinePool":
        cluster = obj["spec"].get("clusterName")
        return cluster != CLUSTER or c.MACHINE_POOL_FINALIZER in finalizers
    return bool(finalizers)


async def _canary(env: Env, stop: asyncio.Event, cycles: list[int]) -> None:
    """Scale the canary between 1 and 2 until told to stop, counting converged cycles."""
    replicas = 1
    while not stop.is_set():
        replicas = 3 - replicas
        await scale_pool(env.client, env.namespace, "canary", replicas)
        await env.world.until(
            functools.partial(env.world.running, "canary", replicas, VERSION),
            f"canary at {replicas} during the barrage",
        )
        cycles[0] += 1


async def test_barrage_of_generated_pools(
    env: Env, webhooks: WebhookServer, scale: int, report: Recorder
) -> None:
    _ = webhooks
    await _wait_effective(env.client, env.namespace)
    controller, _kubelet = await env.spawn_system()
    await create_pool(env.client, env.namespace, "canary", replicas=1)
    await env.world.until(lambda: env.world.running("canary", 1, VERSION), "canary Ready")
    cases = generate(machine_pools(), MACHINE_POOLS_PER_SCALE * scale)
    cases += generate(infra_pools(), INFRA_POOLS_PER_SCALE * scale)
    tally, stop, cycles = Tally(), asyncio.Event(), [0]
    canary = asyncio.create_task(_canary(env, stop, cycles))
    try:
        for start in range(0, len(cases), BATCH):
            await _batch(env, cases[start : start + BATCH], tally, controller)
    finally:
        stop.set()
        await canary
    assert controller.alive
    assert controller.kills == 0
    assert programming_errors(controller.log.read_text(errors="replace")) == []
    assert tally.problems == [], "\n".join(tally.problems)
    assert cycles[0] >= 1
    print(
        f"\nreliability: {tally.tried} generated inputs ({tally.rejected} rejected, "
        f"{tally.accepted} accepted and reconciled); canary converged {cycles[0]} times"
    )
    report.record("generated inputs", tally.tried)
    report.record("rejected naming the field", tally.rejected)
    report.record("accepted and reconciled", tally.accepted)
    report.record("canary convergences meanwhile", cycles[0])


async def _batch(env: Env, cases: list[Case], tally: Tally, controller: ControllerProcess) -> None:
    gate = asyncio.Semaphore(8)

    async def one(case: Case) -> Case | None:
        async with gate:
            return case if await _submit(env.client, env.namespace, case, tally) else None

    accepted = [c_ for c_ in await asyncio.gather(*(one(c_) for c_ in cases)) if c_ is not None]
    await env.world.until(
        lambda: all(_reconciled(env, c_) for c_ in accepted) or not controller.alive,
        f"{len(accepted)} accepted inputs reconciled",
    )
    assert controller.alive, controller.tail()
    for case in accepted:
        res = MACHINE_POOLS if case.kind == "MachinePool" else SIM_MACHINE_POOLS
        await env.client.delete(res, case.name, env.namespace)
    await env.world.until(
        lambda: all(
            env.world.get(
                "machinepools" if c_.kind == "MachinePool" else "simmachinepools", c_.name
            )
            is None
            for c_ in accepted
        ),
        "accepted inputs deleted (finalizers released)",
    )
