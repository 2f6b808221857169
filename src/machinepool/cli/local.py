"""The local environment behind ``machinepool up``, ``down`` and ``status``.

``up`` starts a detached supervisor process (``python -m machinepool.cli.local HOME``) that
owns everything: the management control plane, one workload cluster registered as the
Cluster ``demo`` in namespace ``default``, the CRDs, and two child processes: the controllers
(core, bootstrap, Sim provider, with the webhook server) and the node simulator. The
supervisor restarts a child that dies and writes ``HOME/state.json`` so other commands can
find kubeconfigs, logs and pids. ``down`` sends it SIGTERM and waits until all is gone; the
supervisor stops its children and the control plane together, not one after another.

What a run leaves in HOME (etcd data under ``controlplane/``, certificates, logs) stays: the
next ``up`` starts the same clusters again, with the pools a user made, as a management
cluster restarted after an outage would. ``wipe`` deletes it for a clean start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import ControlPlane, NodeAuth
from machinepool.controlplane.process import Process, free_port, stop_all
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime.kube.client import CRDS, Client, Obj, wait_established
from machinepool.runtime.kube.errors import NotFound

_MANAGER = "machinepool-local"
CLUSTER_NAME = "demo"
CLUSTER_NAMESPACE = "default"
_READY_TIMEOUT = 300.0


def default_home() -> Path:
    return Path(os.environ.get("MACHINEPOOL_HOME") or Path.home() / ".machinepool")


@dataclass
class State:
    """What ``HOME/state.json`` records about a running local environment."""

    pid: int
    phase: str = "starting"  # starting | ready | failed | stopped
    error: str = ""
    kubeconfig: str = ""
    workload_kubeconfig: str = ""
    cluster: str = f"{CLUSTER_NAMESPACE}/{CLUSTER_NAME}"
    processes: dict[str, int] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)

    def write(self, home: Path) -> None:
        tmp = home / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(home / "state.json")

    @classmethod
    def read(cls, home: Path) -> State | None:
        try:
            return cls(**json.loads((home / "state.json").read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is not running.
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text().split()[2]
        return status != "Z"
    return True


def running_state(home: Path) -> State | None:
    state = State.read(home)
    if state is None or not alive(state.pid):
        return None
    return state


# -- client side: up / down ----------------------------------------------------------------


def up(home: Path, *, timeout: float = _READY_TIMEOUT) -> State:
    """Start the environment in the background (or find it running); wait until ready."""
    home.mkdir(parents=True, exist_ok=True)
    state = running_state(home)
    pid = state.pid if state is not None else _start_supervisor(home)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = State.read(home)
        # A state file left by an earlier run (say, one that failed) is not this one's.
        if state is not None and state.pid == pid:
            if state.phase == "ready" and alive(pid):
                return state
            if state.phase == "failed":
                raise RuntimeError(f"local environment failed to start: {state.error}")
        if not alive(pid):
            raise RuntimeError(f"the local environment's supervisor exited; see {home}/local.log")
        time.sleep(0.3)
    raise TimeoutError(f"local environment not ready after {timeout:.0f}s; see {home}/local.log")


def _start_supervisor(home: Path) -> int:
    with (home / "local.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "machinepool.cli.local", str(home)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def down(home: Path, *, timeout: float = 60.0) -> bool:
    """Stop the environment; return whether one was running."""
    state = running_state(home)
    if state is None:
        return False
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    return True


def wipe(home: Path) -> list[Path]:
    """Delete what ``up`` keeps between runs (etcd data, certificates, logs, state); refuses
    while the environment runs. Returns what was removed."""
    if running_state(home) is not None:
        raise RuntimeError(f"the local environment in {home} is running: 'machinepool down' first")
    removed = []
    for name in ("controlplane", "logs", "state.json", "local.log"):
        path = home / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        removed.append(path)
    return removed


# -- supervisor side -----------------------------------------------------------------------


async def _install(kubeconfig: Path, workload_name: str, cp: ControlPlane) -> None:
    async with await Client.from_kubeconfig(kubeconfig, user_agent="machinepool-local") as client:
        for crd in crd_manifests():
            await client.apply(CRDS, await _keeping_conversion(client, crd), field_manager=_MANAGER)
        for crd in crd_manifests():
            await wait_established(client, crd["metadata"]["name"])
        await register_workload_cluster(
            client, CLUSTER_NAME, CLUSTER_NAMESPACE, cp.workloads[workload_name]
        )


async def _keeping_conversion(client: Client, crd: Obj) -> Obj:
    """``crd`` with the conversion webhook a previous run registered, if any.

    The controllers point MachinePool conversion at their webhook server when they start
    (``--register-webhooks``), as another field manager. After ``down`` and ``up`` the etcd
    data, and so that setting, is still there; applying the generated CRD (strategy None)
    over it would leave the webhook fields of the other manager beside strategy None, which
    the apiserver refuses. Keeping the registered block until the controllers register again
    (moments later, with the new server's address) is what a restarted cluster would see.
    """
    try:
        current = await client.get(CRDS, crd["metadata"]["name"])
    except NotFound:
        return crd
    conversion = (current.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return crd
    return {**crd, "spec": {**crd["spec"], "conversion": conversion}}


def _children(home: Path, kubeconfig: Path) -> list[tuple[Process, int]]:
    """The controllers and the node simulator, each with its probe port."""
    run = [sys.executable, "-m", "machinepool", "run", "--kubeconfig", str(kubeconfig)]
    ports = {"controllers": free_port(), "kubelet": free_port()}
    controllers = [
        *run,
        "--components",
        "core,bootstrap,sim",
        "--webhook-port",
        str(free_port()),
        "--register-webhooks",
        "--metrics-bind-address",
        f"127.0.0.1:{ports['controllers']}",
        "--insecure-diagnostics",  # loopback only; `machinepool status` reads it
    ]
    nodes = [
        *run,
        "--components",
        "kubelet",
        "--name",
        "machinepool-kubelet",
        "--kubelet-tls-bootstrap",
        "--metrics-bind-address",
        f"127.0.0.1:{ports['kubelet']}",
        "--insecure-diagnostics",
    ]
    logs = home / "logs"
    logs.mkdir(exist_ok=True)
    return [
        (Process("controllers", controllers, logs), ports["controllers"]),
        (Process("kubelet", nodes, logs), ports["kubelet"]),
    ]


def _wait_ready(child: Process, port: int, timeout: float = _READY_TIMEOUT) -> None:
    """Until the child answers /readyz. A ``machinepool run`` process registers its webhooks
    before its manager starts, so a ready controllers process also admits MachinePools: a
    user's first write after ``up`` never meets a webhook configuration that still names the
    last run's server."""
    url = f"http://127.0.0.1:{port}/readyz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(f"{child.name} not ready after {timeout:.0f}s; see {child.log_path}")


def serve(home: Path) -> None:
    """The supervisor: run everything until SIGTERM, restarting children that die."""
    state = State(pid=os.getpid())
    state.write(home)
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    cp = ControlPlane(home / "controlplane")
    children: list[Process] = []
    try:
        cp.start()
        # Kubelets are confined to their own Node as in a kubeadm cluster, and the node
        # simulator joins each instance by TLS bootstrap (--kubelet-tls-bootstrap below): the
        # admin client writes no Node. No audit log: the environment may run for days.
        workload = cp.start_workload(CLUSTER_NAME, node_auth=NodeAuth(audit=False))
        asyncio.run(_install(cp.kubeconfig, CLUSTER_NAME, cp))
        probed = _children(home, cp.kubeconfig)
        children = [child for child, _ in probed]
        for child in children:
            child.start()
        for child, port in probed:
            _wait_ready(child, port)
        state.phase = "ready"
        state.kubeconfig = str(cp.kubeconfig)
        state.workload_kubeconfig = str(workload.kubeconfig)
        procs = cp.processes() + children
        state.processes = {p.name: p.pid or 0 for p in procs}
        state.logs = {p.name: str(p.log_path) for p in procs}
        state.write(home)
        _supervise(children, stop, state, home)
    except Exception as exc:
        state.phase, state.error = "failed", str(exc)
        state.write(home)
        raise
    finally:
        stop_all(children)
        cp.stop()
        if state.phase != "failed":
            state.phase = "stopped"
            state.write(home)


def _supervise(
    children: list[Process], stop: set[signal.Signals], state: State, home: Path
) -> None:
    while signal.sigtimedwait(stop, 1.0) is None:
        for child in children:
            if not child.running():
                child.stop()
                child.start()
                state.processes[child.name] = child.pid or 0
                state.write(home)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
