"""kubectl as users type it, against a running system (real kubectl, real kube-apiserver).

One pool's life, each step the command a user would reach for:

- ``kubectl explain machinepool.spec.template.spec``: every field has a description;
- ``kubectl wait --for=condition=Available mp/NAME``;
- ``kubectl get mp -o wide``: the printer columns, filled;
- ``kubectl scale mp/NAME --replicas=N``: through the scale subresource, the pool follows;
- a version change followed to the end by ``machinepool rollout status`` (kubectl's own
  ``rollout`` knows only built-in kinds);
- ``kubectl get events``: the pool's story, from first instance to the replaced ones;
- a pool made at a version no kubeadm of this provider joins (the seed's own example,
  v1.19.7) says so, and runs once ``kubectl patch`` moves it to a supported one.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from typing import Any

from tests.support.resources import KUBEADM_CONFIGS

from machinepool.controlplane import ControlPlane

from .harness import kubectl

POOL = "web"


async def _kubectl(cp: ControlPlane, *args: str) -> str:
    """kubectl in a thread: the system's controllers run on this event loop meanwhile."""
    result = await asyncio.to_thread(kubectl, cp.kubeconfig, *args)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


async def test_explain_describes_every_field_of_the_machine_template(
    control_plane: ControlPlane, crds: list[str]
) -> None:
    # The apiserver publishes a new CRD's OpenAPI a moment after it is Established.
    async with asyncio.timeout(60):
        while True:
            explain = await asyncio.to_thread(
                kubectl, control_plane.kubeconfig, "explain", "machinepool.spec.template.spec"
            )
            if "couldn't find resource" not in explain.stderr:
                break
            await asyncio.sleep(0.5)
    assert explain.returncode == 0, explain.stderr
    out = explain.stdout
    assert "DESCRIPTION:" in out
    fields = out.split("FIELDS:", 1)[1]
    # Each field is a line "  name\t<type>" followed by its indented description.
    entries = re.split(r"\n  (?=\S)", "\n" + fields.strip("\n"))
    named = [e for e in entries if e.strip()]
    assert {"bootstrap", "clusterName", "infrastructureRef", "version"} <= {
        e.split()[0] for e in named
    }
    for entry in named:
        lines = [line.strip() for line in entry.splitlines()[1:] if line.strip()]
        assert lines, f"no description for field {entry.split()[0]!r}"
        assert "<no description>" not in entry


async def _story(cp: ControlPlane, ns: str) -> list[tuple[str, str, str]]:
    """``kubectl get events`` about the pool's objects, as (kind, reason, message)."""
    out = await _kubectl(
        cp,
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        f"involvedObject.name={POOL}",
        "-o",
        "json",
    )
    events = json.loads(out)["items"]
    return [(e["involvedObject"]["kind"], e["reason"], e.get("message", "")) for e in events]


async def test_a_pool_through_kubectl(system: Any, control_plane: ControlPlane) -> None:
    ns = system.namespace
    await system.create_pool(POOL, 2, version="v1.33.4")

    wait = await _kubectl(
        control_plane, "wait", "-n", ns, "--for=condition=Available", f"mp/{POOL}", "--timeout=120s"
    )
    assert f"machinepool.cluster.x-k8s.io/{POOL} condition met" in wait
    await system.until(lambda: system.pool_running(POOL, 2), "the pool running 2 Nodes")

    wide = (await _kubectl(control_plane, "get", "mp", "-n", ns, "-o", "wide")).splitlines()
    assert wide[0].split() == [
        "NAME",
        "CLUSTER",
        "DESIRED",
        "CURRENT",
        "READY",
        "AVAILABLE",
        "UP-TO-DATE",
        "PAUSED",
        "PHASE",
        "AGE",
        "VERSION",
    ]
    row = wide[1].split()
    assert row[:9] == [POOL, system.cluster, "2", "2", "2", "2", "2", "False", "Running"]
    assert row[-1] == "v1.33.4"

    scaled = await _kubectl(control_plane, "scale", "-n", ns, f"mp/{POOL}", "--replicas=3")
    assert f"machinepool.cluster.x-k8s.io/{POOL} scaled" in scaled
    await system.until(lambda: system.pool_running(POOL, 3), "the pool running 3 Nodes")

    patch = {"spec": {"template": {"spec": {"version": "v1.34.0"}}}}
    await _kubectl(
        control_plane, "patch", "-n", ns, f"mp/{POOL}", "--type=merge", "-p", json.dumps(patch)
    )
    rollout = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "machinepool",
            "rollout",
            "status",
            POOL,
            "-n",
            ns,
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--timeout",
            "240",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert rollout.returncode == 0, rollout.stdout + rollout.stderr
    assert f"machinepool/{POOL} rolled out" in rollout.stdout
    await system.until(lambda: len(system.ready_nodes("v1.34.0")) == 3, "3 Nodes at v1.34.0")

    # Events are written in the background: read until the last replacement's is there.
    async with asyncio.timeout(60):
        while True:
            story = await _story(control_plane, ns)
            created = [m for _, reason, m in story if reason == "SuccessfulCreate"]
            deleted = [m for _, reason, m in story if reason == "SuccessfulDelete"]
            if _told(created) >= 6 and _told(deleted) >= 3:
                break
            await asyncio.sleep(0.5)
    # 2, then 1 more for the scale-up, then 3 replacements at the new version (one Event per
    # step: "Created 2 instances (...)", "Created instance ...")
    assert _told(created) == 6, story
    assert _told([m for m in created if "(v1.34.0)" in m]) == 3, story
    assert _told(deleted) == 3, story
    assert all("replaced by an up-to-date instance" in m for m in deleted), story
    assert any(
        kind == "MachinePool" and reason == "SuccessfulSetNodeRefs" for kind, reason, _ in story
    ), story


FIXED_WITHIN = 45.0
"""Seconds from the ``kubectl patch`` to a Running pool of 2. The patch is an event the
bootstrap controller's pool watch passes (the version is one of ``pool_inputs``), so the data
Secret follows within a reconcile, and then two instances boot (1-3 s each) and join, as in
any pool's creation (5-15 s here under CI's load). Without the event the fix waits for the
next retry of a backoff that has doubled since the pool was made: minutes after a few."""


async def test_a_pool_at_an_unsupported_version_runs_once_kubectl_fixes_it(
    system: Any, control_plane: ControlPlane
) -> None:
    ns = system.namespace
    await system.create_pool("old", 2, version="v1.19.7")

    def refused() -> bool:
        config = system.watched["kubeadmconfigs"].get("old", ns) or {}
        return any(
            cond.get("type") == "DataSecretAvailable" and "v1.19.7" in cond.get("message", "")
            for cond in (config.get("status") or {}).get("conditions") or []
        )

    await system.watch("kubeadmconfigs", await system.manager.cache.get_informer(KUBEADM_CONFIGS))
    await system.until(refused, "the config saying v1.19.7 cannot be joined")
    described = await _kubectl(control_plane, "get", "kubeadmconfig", "old", "-n", ns, "-o", "json")
    message = next(
        c["message"]
        for c in json.loads(described)["status"]["conditions"]
        if c["type"] == "DataSecretAvailable"
    )
    assert "older than v1.22" in message, message
    assert "use v1.22 or later" in message, message

    patch = {"spec": {"template": {"spec": {"version": "v1.34.4"}}}}
    loop = asyncio.get_running_loop()
    start = loop.time()
    await _kubectl(
        control_plane, "patch", "-n", ns, "mp/old", "--type=merge", "-p", json.dumps(patch)
    )
    await system.until(
        lambda: system.pool_running("old", 2), "the fixed pool running 2 Nodes", FIXED_WITHIN
    )
    assert len(system.ready_nodes("v1.34.4")) == 2
    took = loop.time() - start
    assert took < FIXED_WITHIN, took


def _told(messages: list[str]) -> int:
    """How many instances or Machines a pool's step Events name ("Created 2 instances ...",
    "Deleting Machine x ...")."""
    return sum(int(m.split()[1]) if m.split()[1].isdigit() else 1 for m in messages)
