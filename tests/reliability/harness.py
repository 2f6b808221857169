"""Shared machinery of the reliability suite: controller processes, watchers, invariants.

The tests in this folder run the controllers the way they run in production, as separate
``python -m machinepool run`` processes, so they can be killed with SIGKILL at any moment.
``ControllerProcess`` starts, kills and restarts one such process and keeps its log; ``World``
watches the management and workload clusters (no polling loops in tests: ``until`` re-checks
on every watched change); ``check_converged`` states what "nothing lost" means; ``scan_secrets``
searches logs and Events for credentials. Used by every ``test_*.py`` beside it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from tests.conftest import install_crds
from tests.support import Changes
from tests.support.builders import CLUSTER
from tests.support.conditions import is_true
from tests.support.pools import reports_running
from tests.support.resources import (
    KUBEADM_CONFIGS,
    MACHINE_POOLS,
    MACHINES,
    SIM_MACHINE_POOLS,
    SIM_MACHINES,
)

from machinepool.controlplane import ControlPlane
from machinepool.controlplane.process import free_port
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import (
    CORE_EVENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    SECRETS,
    Client,
    FuncHandler,
    Informer,
    NotFound,
    Obj,
)
from machinepool.simworld import InstanceRecord
from machinepool.simworld.records import records_in

WAIT = 300.0
"""Safety net for any single wait, so a broken system fails instead of hanging."""
AWS_CANARY_SECRET = "rElIaBiLiTyCaNaRyAwSsEcReTkEy0123456789ab"
"""Handed to every controller process as AWS_SECRET_ACCESS_KEY; must never be logged."""


# -- controller processes ----------------------------------------------------------------


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: a crashed pytest must not leave controllers running on shared cores.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


_STANDBY = """\
import json, sys
import machinepool.app, machinepool.app.process, machinepool.cli
sys.argv = json.loads(sys.stdin.readline() or "null") or sys.exit(0)
machinepool.cli.main()
"""
"""A ``python -m machinepool`` that imports the package first and waits on stdin for its
argv: all it holds before that line is imported code, nothing read from a cluster."""


@dataclass
class ControllerProcess:
    """One ``python -m machinepool run`` process that can be killed and restarted.

    Every incarnation appends to the same ``log``; ``kills`` counts SIGKILLs; ``down`` holds
    (killed_at, restarted_at) monotonic intervals so invariants can exempt them.
    """

    name: str
    kubeconfig: Path
    components: str
    log: Path
    leader_elect: bool = False
    lease_name: str = "machinepool-controller"
    webhook_port: int | None = None
    extra_args: tuple[str, ...] = ()
    secure_diagnostics: bool = False
    """As deployed: /metrics over HTTPS for authorized tokens only on ``port``, probes on
    ``health_port``. Off: everything plain HTTP on ``port`` (--insecure-diagnostics)."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in the process's environment over ours (and over the canary AWS secret)."""
    warm_restarts: bool = False
    """Start the next incarnation's interpreter with this one and let it import the package
    while this one runs (a standby), so a restart costs the manager's own start, not the imports
    (seconds on two busy cores; a test that kills a process fifty times pays them fifty
    times). The standby is a new process all the same: it has read nothing from a cluster
    and gets its argv only when it takes over."""
    port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    standby: subprocess.Popen[bytes] | None = None
    kills: int = 0
    down: list[tuple[float, float]] = field(default_factory=list)

    def argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "machinepool",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--components",
            self.components,
            "--name",
            self.lease_name,
            "--metrics-bind-address",
            f"127.0.0.1:{self.port}",
            "--leader-elect" if self.leader_elect else "--no-leader-elect",
            *self.extra_args,
        ]
        if self.secure_diagnostics:
            argv += ["--health-probe-bind-address", f"127.0.0.1:{self.health_port}"]
        else:
            argv.append("--insecure-diagnostics")  # probes and metrics over HTTP on loopback
        if self.webhook_port is not None:
            argv += ["--webhook-port", str(self.webhook_port)]
        return argv

    def _environ(self) -> dict[str, str]:
        env = {**os.environ, "AWS_SECRET_ACCESS_KEY": AWS_CANARY_SECRET}
        env.setdefault("AWS_ACCESS_KEY_ID", "AKIARELIABILITYTEST0")
        env.update(self.env)
        return env

    def _spawn_standby(self) -> None:
        """A standby importing the package now (see ``warm_restarts``)."""
        if self.standby is not None and self.standby.poll() is None:
            return
        with self.log.open("ab") as out:
            self.standby = subprocess.Popen(
                [sys.executable, "-c", _STANDBY],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                env=self._environ(),
                preexec_fn=_die_with_parent,
            )

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.name} at {time.time():.3f}\n".encode())
            out.flush()
            standby, self.standby = self.standby, None
            if standby is not None and standby.poll() is None and standby.stdin is not None:
                standby.stdin.write(json.dumps(self.argv()[2:]).encode() + b"\n")
                standby.stdin.close()
                self.proc = standby
            else:
                self.proc = subprocess.Popen(
                    self.argv(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self._environ(),
                    preexec_fn=_die_with_parent,
                )
        if self.warm_restarts:
            self._spawn_standby()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no Lease release, requests cut mid-flight."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def crash_and_restart(self) -> None:
        """SIGKILL, then start again at once; down until the next ``wait_ready``."""
        killed_at = time.monotonic()
        self.kill()
        self.start()
        self.down.append((killed_at, math.inf))

    def stop(self) -> None:
        if self.standby is not None:
            self.standby.kill()
            self.standby.wait()
            self.standby = None
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    async def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /readyz answers 200 (informers synced) from this process; fails if the
        process exits.

        Ports come from ``free_port()``, and another xdist worker's process may bind one
        between that and our start: the process then exits at once, while the other one
        answers on the port. So a 200 counts only from a socket this process listens on, and
        a process that lost its port that way starts again on new ones.
        """
        async with asyncio.timeout(timeout), aiohttp.ClientSession() as http:
            while True:
                if not self.alive:
                    if "error while attempting to bind" not in self.tail(5):
                        raise AssertionError(f"{self.name} exited; log tail:\n{self.tail()}")
                    self.port, self.health_port = free_port(), free_port()
                    self.start()
                port = self.health_port if self.secure_diagnostics else self.port
                url = f"http://127.0.0.1:{port}/readyz"
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        if resp.status == 200 and self._listens_on(port):
                            if self.down and self.down[-1][1] == math.inf:
                                self.down[-1] = (self.down[-1][0], time.monotonic())
                            return
                await asyncio.sleep(0.2)

    def _listens_on(self, port: int) -> bool:
        """Whether this process holds the listening socket of ``port`` (Linux /proc)."""
        if self.proc is None or not self.alive:
            return False
        hexport = f":{port:04X}"
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(hexport) and fields[3] == "0A":  # LISTEN
                        inodes.add(f"socket:[{fields[9]}]")
        fds = Path(f"/proc/{self.proc.pid}/fd")
        with contextlib.suppress(OSError):
            for fd in fds.iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return True
        return False

    async def metric(self, name: str) -> float | None:
        """One sample of a Prometheus metric (first series), ``None`` if unreachable."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        try:
            async with aiohttp.ClientSession() as http, http.get(url) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, OSError):
            return None
        for line in text.splitlines():
            if line.startswith(name) and not line.startswith("#"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def was_down(self, at: float) -> bool:
        return any(start <= at <= end for start, end in self.down)


async def chaos_kills(
    proc: ControllerProcess, kills: int, rng: random.Random, max_delay: float
) -> None:
    """Kill ``proc`` ``kills`` times at random moments of its work, restarting at once.

    Each incarnation is allowed to sync its caches first (a kill during import proves
    nothing), then runs a random 0..``max_delay`` seconds before SIGKILL.
    """
    for _ in range(kills):
        await proc.wait_ready()
        await asyncio.sleep(rng.uniform(0.0, max_delay))
        proc.crash_and_restart()
    await proc.wait_ready()


# -- objects -------------------------------------------------------------------------------


# -- watching ------------------------------------------------------------------------------


def _version(node: Obj) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""))


@dataclass
class NodeDeletion:
    name: str
    provider_id: str
    version: str
    at: float


@dataclass
class World(Changes):
    """Informers over one namespace of the management cluster and its workload's Nodes.

    Records every Node deletion and, on every Node change, the number of Ready Nodes, so
    tests can judge victims and availability after the fact.
    """

    client: Client
    workload_client: Client
    namespace: str
    informers: dict[str, Informer] = field(default_factory=dict)
    deleted_nodes: list[NodeDeletion] = field(default_factory=list)
    ready_samples: list[tuple[float, int]] = field(default_factory=list)
    seen_records: dict[str, InstanceRecord] = field(default_factory=dict)
    """Every instance record ever seen, by id (records are pruned once terminated)."""
    pool_by_provider_id: dict[str, str] = field(default_factory=dict)
    """The pool of every instance ever seen: a Node is named after its instance's hostname,
    so its pool is known only through its providerID."""
    patience = WAIT

    @classmethod
    async def start(cls, client: Client, workload_client: Client, namespace: str) -> World:
        world = cls(client, workload_client, namespace)
        sources = {
            "nodes": Informer(workload_client, NODES),
            "machinepools": Informer(client, MACHINE_POOLS, namespace),
            "machines": Informer(client, MACHINES, namespace),
            "simmachines": Informer(client, SIM_MACHINES, namespace),
            "simmachinepools": Informer(client, SIM_MACHINE_POOLS, namespace),
            "secrets": Informer(client, SECRETS, namespace),
        }
        for name, informer in sources.items():
            world.informers[name] = world.follow(informer)
        sources["secrets"].add_handler(
            FuncHandler(world._remember, lambda _o, n: world._remember(n), None)
        )
        sources["nodes"].add_handler(
            FuncHandler(world._sample, lambda _o, n: world._sample(n), world._node_gone)
        )
        for informer in sources.values():
            await informer.start()
        for informer in sources.values():
            await informer.wait_synced()
        return world

    async def stop(self) -> None:
        for informer in self.informers.values():
            await informer.stop()

    def _remember(self, secret: Obj) -> None:
        if secret.get("type") == "sim.infrastructure.cluster.x-k8s.io/instance":
            for record in records_in(secret):
                self.seen_records[record.id] = record
                self.pool_by_provider_id[record.provider_id] = record.pool

    def _sample(self, *_: Obj) -> None:
        self.ready_samples.append((time.monotonic(), len(self.ready_nodes())))

    def _node_gone(self, node: Obj) -> None:
        self.deleted_nodes.append(
            NodeDeletion(
                node["metadata"]["name"],
                str((node.get("spec") or {}).get("providerID", "")),
                _version(node),
                time.monotonic(),
            )
        )
        self._sample()

    # -- reading ---------------------------------------------------------------------------

    def objects(self, kind: str) -> list[Obj]:
        return self.informers[kind].list()

    def get(self, kind: str, name: str) -> Obj | None:
        namespace = "" if kind == "nodes" else self.namespace
        return self.informers[kind].get(name, namespace)

    def nodes(self) -> list[Obj]:
        return self.objects("nodes")

    def pool_of(self, node: Obj) -> str | None:
        """The pool whose instance ``node`` runs on, if its instance was seen."""
        return self.pool_by_provider_id.get(str((node.get("spec") or {}).get("providerID", "")))

    def node_of(self, machine: str) -> Obj | None:
        """The Node of pool Machine ``machine``, matched by providerID as the core matches
        it (a Node is named after its instance's hostname, never after the Machine)."""
        pid = ((self.get("machines", machine) or {}).get("spec") or {}).get("providerID")
        if not pid:
            return None
        return next((n for n in self.nodes() if n["spec"].get("providerID") == pid), None)

    def ready_nodes(self, version: str | None = None) -> list[Obj]:
        return [
            n
            for n in self.nodes()
            if is_true(n, "Ready") and (version is None or _version(n) == version)
        ]

    def records(self) -> list[InstanceRecord]:
        return [
            record
            for s in self.objects("secrets")
            if s.get("type") == "sim.infrastructure.cluster.x-k8s.io/instance"
            for record in records_in(s)
        ]

    def live(self, pool: str) -> list[InstanceRecord]:
        """Instances of ``pool`` the cloud would bill for (not terminated)."""
        return [r for r in self.records() if r.pool == pool and r.forced_state != "terminated"]

    def steady(self, pool: str, replicas: int, version: str) -> Callable[[], bool]:
        """A check for ``until``: ``pool`` runs ``replicas`` on ``version``, nothing lost."""

        def check() -> bool:
            return self.running(pool, replicas, version) and not check_converged(
                self, pool, replicas, version
            )

        return check

    def pool_running(self, name: str, replicas: int, version: str) -> bool:
        """Like ``running`` for one of several pools sharing the workload cluster: its own
        status, its live instances, and Ready Nodes on ``version`` for each of them."""
        if not reports_running(self.get("machinepools", name), replicas):
            return False
        pids = {r.provider_id for r in self.live(name)}
        ready = [
            n
            for n in self.ready_nodes(version)
            if str((n.get("spec") or {}).get("providerID", "")) in pids
        ]
        return len(pids) == replicas and len(ready) == replicas

    def running(self, name: str, replicas: int, version: str | None = None) -> bool:
        """The MachinePool reports ``replicas`` Ready and the workload agrees."""
        mp = self.get("machinepools", name)
        return (
            reports_running(mp, replicas)
            and ((mp or {}).get("status") or {}).get("replicas", 0) == replicas
            and len(self.ready_nodes(version)) == replicas
            and len(self.nodes()) == replicas
            and len(self.live(name)) == replicas
            and len(self.objects("machines")) == replicas
        )


# -- invariants ----------------------------------------------------------------------------


def check_converged(world: World, pool: str, replicas: int, version: str) -> list[str]:
    """Everything that must hold once ``pool`` settled at ``replicas`` on ``version``.

    Returns the violations (empty when all hold): instances == desired; providerIDList ==
    instances; one Machine and one SimMachine per instance and nothing else; one Ready Node
    per instance and nothing else; terminated records back nothing; instance records and
    bootstrap data Secrets belong to objects that exist.
    """
    return check_pools_converged(world, {pool: replicas}, version)


def check_pools_converged(world: World, pools: dict[str, int], version: str) -> list[str]:
    """``check_converged`` for several pools sharing the namespace and workload cluster:
    per pool its instances and providerIDList; across them Machines, SimMachines and Nodes."""
    problems: list[str] = []
    all_ids: list[str] = []
    all_pids: list[str] = []
    for pool, replicas in pools.items():
        mp = world.get("machinepools", pool) or {}
        live = world.live(pool)
        live_ids = sorted(r.id for r in live)
        live_pids = sorted(r.provider_id for r in live)
        all_ids += live_ids
        all_pids += live_pids
        if len(live) != replicas:
            problems.append(f"{pool}: {len(live)} live instances, want {replicas}: {live_ids}")
        if len({r.index for r in live}) != len(live):
            problems.append(f"{pool}: duplicate instance ordinals: {sorted(r.index for r in live)}")
        pid_list = list((mp.get("spec") or {}).get("providerIDList") or [])
        if sorted(pid_list) != live_pids or len(set(pid_list)) != len(pid_list):
            problems.append(f"{pool}: providerIDList {pid_list} != live instances {live_pids}")
    all_ids.sort()
    all_pids.sort()
    for kind in ("machines", "simmachines"):
        names = sorted(o["metadata"]["name"] for o in world.objects(kind))
        if names != all_ids:
            problems.append(f"{kind} {names} != live instances {all_ids}")
    nodes = world.nodes()
    node_pids = sorted(str((n.get("spec") or {}).get("providerID", "")) for n in nodes)
    if node_pids != all_pids:
        problems.append(f"Nodes {node_pids} != live instances {all_pids}")
    stale = [
        n["metadata"]["name"] for n in nodes if _version(n) != version or not is_true(n, "Ready")
    ]
    if stale:
        problems.append(f"Nodes not Ready on {version}: {stale}")
    problems += _orphan_secrets(world)
    return problems


def _orphan_secrets(world: World) -> list[str]:
    pools = {p["metadata"]["name"] for p in world.objects("simmachinepools")}
    configs_owned = {
        ref.get("name")
        for s in world.objects("secrets")
        for ref in s["metadata"].get("ownerReferences") or []
        if ref.get("kind") == "KubeadmConfig"
    }
    problems = [
        f"instance record {r.id} of missing pool {r.pool}"
        for r in world.records()
        if r.pool not in pools
    ]
    machine_pools = {p["metadata"]["name"] for p in world.objects("machinepools")}
    problems += [
        f"bootstrap Secret owned by missing KubeadmConfig {name}"
        for name in configs_owned
        if name not in machine_pools
    ]
    return problems


def judge_victims(
    deleted: Iterable[NodeDeletion], *, old_version: str | None, max_deleted: int
) -> list[str]:
    """Node deletions during one phase must be the chosen victims: no more than the phase
    needs, and during a rollout only Nodes of the old version."""
    deleted = list(deleted)
    problems = []
    if len(deleted) > max_deleted:
        problems.append(
            f"{len(deleted)} Nodes deleted, at most {max_deleted} were victims: "
            f"{[d.name for d in deleted]}"
        )
    if old_version is not None:
        wrong = [d.name for d in deleted if d.version != old_version]
        if wrong:
            problems.append(f"Nodes on the new version deleted during the rollout: {wrong}")
    return problems


# -- retries against the backoff --------------------------------------------------------------

BACKOFF_BASE = 0.005
"""The work queue's first retry delay (runtime.ExponentialBackoff's default)."""
FAILED_RECONCILE = "reconcile failed; retrying with backoff"


def backoff_budget(span: float, base: float = BACKOFF_BASE) -> int:
    """Most failed attempts one key can make within ``span`` seconds when only its backoff
    re-queues it: n attempts are separated by base * (2**(n-1) - 1) seconds of delays.

    >>> backoff_budget(0.0), backoff_budget(0.005), backoff_budget(20.0)
    (1, 2, 12)
    """
    return math.floor(math.log2(span / base + 1)) + 1


@dataclass
class FailureStreak:
    """Consecutive failed reconciles of one key (its backoff's ``retries`` counting up)."""

    controller: str
    key: str
    times: list[float] = field(default_factory=list)

    @property
    def span(self) -> float:
        return self.times[-1] - self.times[0]


def failure_streaks(log: Path) -> list[FailureStreak]:
    """Every streak of failed reconciles in a JSON-format controller log.

    A streak ends when the key succeeds (its backoff is forgotten and ``retries`` starts
    again at 1) or a new process starts (a fresh queue).
    """
    open_streaks: dict[tuple[str, str], FailureStreak] = {}
    done: list[FailureStreak] = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("=== start"):
            done += open_streaks.values()
            open_streaks.clear()
            continue
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if doc.get("msg") != FAILED_RECONCILE:
            continue
        who = (str(doc.get("controller")), str(doc.get("key")))
        at = datetime.fromisoformat(doc["ts"]).timestamp()
        streak = open_streaks.get(who)
        if streak is None or int(doc.get("retries", 1)) <= 1:
            if streak is not None:
                done.append(streak)
            streak = open_streaks[who] = FailureStreak(*who)
        streak.times.append(at)
    return done + list(open_streaks.values())


def storms(streaks: Iterable[FailureStreak], slack: int) -> list[str]:
    """Streaks with more failures than the backoff allows in their span (``slack`` extra, for
    changes made by others that re-queue a key at once, as in client-go)."""
    return [
        f"{s.controller} {s.key}: {len(s.times)} failures in {s.span:.2f}s, backoff allows"
        f" {backoff_budget(s.span)} + {slack}"
        for s in streaks
        if len(s.times) > backoff_budget(s.span) + slack
    ]


# -- secrets in logs and Events --------------------------------------------------------------

BOOTSTRAP_TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def secret_needles(kubeconfig_secrets: Iterable[Obj], extra: Iterable[str] = ()) -> list[str]:
    """Literal credentials to search for: kubeconfig client keys (base64 and PEM body lines),
    bearer tokens, the AWS canary and ``extra``."""
    needles = [AWS_CANARY_SECRET, *extra]
    for secret in kubeconfig_secrets:
        raw = base64.b64decode((secret.get("data") or {}).get("value", "")).decode()
        for match in re.finditer(r"(client-key-data|token):\s*(\S+)", raw):
            value = match.group(2)
            needles.append(value[:64])
            if match.group(1) == "client-key-data":
                pem = base64.b64decode(value).decode()
                needles += [line for line in pem.splitlines() if len(line) >= 40][:3]
    return [n for n in needles if len(n) >= 16]


def scan_text(text: str, needles: Iterable[str]) -> list[str]:
    """Credentials found in ``text``: bootstrap tokens, private keys, and any needle."""
    found = [f"bootstrap token {m.group(0)[:7]}..." for m in BOOTSTRAP_TOKEN.finditer(text)]
    found += ["a PEM private key" for _ in PRIVATE_KEY.finditer(text)]
    found += [f"credential {n[:6]}..." for n in needles if n in text]
    return found


async def scan_events(client: Client, namespace: str, needles: list[str]) -> list[str]:
    """Credentials in any Event (events.k8s.io and core) of ``namespace``."""
    problems = []
    for res in (EVENTS, CORE_EVENTS):
        listed = await client.list(res, namespace)
        for event in listed.items:
            text = " ".join(str(event.get(k, "")) for k in ("note", "message", "reason", "action"))
            problems += [
                f"Event {event['metadata']['name']}: {f}" for f in scan_text(text, needles)
            ]
    return problems


def scan_logs(paths: Iterable[Path], needles: list[str]) -> list[str]:
    problems = []
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        problems += [f"{path.name}: {f}" for f in scan_text(text, needles)]
    return problems


# -- one scenario's environment ---------------------------------------------------------------


@dataclass
class Env:
    """A namespace with a registered workload Cluster, a ``World`` over it, and the
    controller processes a test spawned (all stopped by ``close``)."""

    client: Client
    namespace: str
    kubeconfig: Path
    workload_kubeconfig: Path
    world: World
    logs: Path
    procs: list[ControllerProcess] = field(default_factory=list)

    def spawn(self, name: str, components: str, **options: Any) -> ControllerProcess:
        proc = ControllerProcess(
            name=name,
            kubeconfig=options.pop("kubeconfig", self.kubeconfig),
            components=components,
            log=self.logs / f"{self.namespace}-{name}.log",
            **options,
        )
        proc.start()
        self.procs.append(proc)
        return proc

    async def spawn_system(
        self, kubelet_args: tuple[str, ...] = (), **options: Any
    ) -> tuple[ControllerProcess, ControllerProcess]:
        """The controllers (killable; ``options`` are theirs) and the node simulator (run with
        ``kubelet_args``), as two processes."""
        controller = self.spawn("controller", "core,bootstrap,sim", **options)
        kubelet = self.spawn("kubelet", "kubelet", extra_args=kubelet_args)
        await controller.wait_ready()
        await kubelet.wait_ready()
        return controller, kubelet

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()

    async def release(self) -> None:
        """Stop the processes, then drop our finalizers so the namespace can go: no later
        test's controllers should find these objects pointing at a stopped workload cluster."""
        self.close()
        for res in (MACHINE_POOLS, MACHINES, KUBEADM_CONFIGS, SIM_MACHINE_POOLS, SIM_MACHINES):
            for obj in (await self.client.list(res, self.namespace)).items:
                if obj["metadata"].get("finalizers"):
                    with contextlib.suppress(NotFound):
                        await self.client.patch(
                            res,
                            obj["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                            self.namespace,
                        )

    @property
    def kills(self) -> int:
        return sum(p.kills for p in self.procs)

    async def secret_findings(self) -> list[str]:
        """Credentials in this scenario's process logs or its namespace's Events."""
        listed = await self.client.list(SECRETS, self.namespace)
        kubeconfigs = [s for s in listed.items if s["metadata"]["name"].endswith("-kubeconfig")]
        needles = secret_needles(kubeconfigs)
        findings = scan_logs((p.log for p in self.procs), needles)
        return findings + await scan_events(self.client, self.namespace, needles)


@contextlib.asynccontextmanager
async def private_env(
    root: Path,
    logs: Path,
    workload: str,
    *,
    management_args: tuple[str, ...] = (),
) -> AsyncIterator[tuple[ControlPlane, Env]]:
    """A control plane of the test's own under ``root`` (for faults the session's must not
    see: outages, load shedding with ``management_args``), its workload cluster ``workload``
    registered in a fresh namespace, and an ``Env`` with a ``World`` over them."""
    cp = ControlPlane(root / "cp", management_args=management_args)
    await asyncio.to_thread(cp.start)
    try:
        cluster = await asyncio.to_thread(cp.start_workload, workload)
        async with (
            await Client.from_kubeconfig(cp.kubeconfig) as client,
            await Client.from_kubeconfig(cluster.kubeconfig) as workload_client,
        ):
            await install_crds(client)
            namespace = f"{workload[0]}-{uuid.uuid4().hex[:8]}"
            await client.create(NAMESPACES, {"metadata": {"name": namespace}})
            await register_workload_cluster(client, CLUSTER, namespace, cluster)
            world = await World.start(client, workload_client, namespace)
            env = Env(client, namespace, cp.kubeconfig, cluster.kubeconfig, world, logs)
            try:
                yield cp, env
            finally:
                env.close()
                await world.stop()
    finally:
        await asyncio.to_thread(cp.stop)
