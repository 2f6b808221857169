"""The controller processes under test and what they cost.

Three kinds of process, each a child that dies with the benchmark (``Process`` from
machinepool.controlplane sets PR_SET_PDEATHSIG), logging into the run's work directory:

- ``ours_core``: ``python -m machinepool run --components core`` (MachinePool + Machine);
- ``upstream_core``: upstream Cluster API's core manager (``machinepool.controlplane.upstream``),
  with the MachinePool feature gate on, insecure (HTTP) diagnostics for /metrics, and its
  webhook server serving a self-signed certificate (no webhook configuration points at it, as
  none points at ours: both cores see the same objects, written fully specified);
- ``infra``: ``python -m machinepool run --components bootstrap,sim,kubelet`` -- the parts both
  runs share (kubeadm bootstrap, Sim provider, node simulator).

Called by ``bench_machinepool.py``; ``Controller.sample()`` reads /proc, ``reconciles()`` the
process's own /metrics.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from machinepool.controlplane import upstream
from machinepool.controlplane.process import Process, ProcessFailed, free_port
from mpbench.stats import ProcSample, prom_by_label, read_proc

RUNNER = Path(__file__).resolve().parent / "runner.py"
MACHINEPOOL_CONTROLLER = "machinepool"
"""The MachinePool controller's name (the ``controller`` metric label), ours and upstream's."""


@dataclass
class Controller:
    """One running controller process with its diagnostics endpoints."""

    name: str
    process: Process
    metrics_url: str
    ready_url: str
    user: str

    @property
    def pid(self) -> int:
        pid = self.process.pid
        if pid is None:
            raise ProcessFailed(f"{self.name} is not running")
        return pid

    def sample(self) -> ProcSample:
        self.process.check_alive()
        return read_proc(self.pid)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=30) as resp:
            return str(resp.read().decode())

    def reconciles(self) -> dict[str, float]:
        """Reconciles so far by controller name (every result)."""
        counts = prom_by_label(self.metrics(), "controller_runtime_reconcile_total", ["controller"])
        return {name: value for (name,), value in counts.items()}

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until /readyz answers 200 and the core controllers (if any) have registered."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.process.check_alive()
            if _ok(self.ready_url) and self._controllers_started():
                return
            time.sleep(0.2)
        raise ProcessFailed(
            f"{self.name} not ready within {timeout:.0f}s; log tail:\n{self.process.log_tail()}"
        )

    def _controllers_started(self) -> bool:
        if "core" not in self.name:
            return True  # only a core registers the MachinePool controller
        try:
            text = self.metrics()
        except (urllib.error.URLError, OSError):
            return False
        started = prom_by_label(
            text, "controller_runtime_max_concurrent_reconciles", ["controller"]
        )
        return (MACHINEPOOL_CONTROLLER,) in started

    def stop(self) -> None:
        self.stop_profile()
        self.process.stop(timeout=20)

    # -- py-spy profile of a Python controller ------------------------------------------

    _profiler: subprocess.Popen[bytes] | None = None
    profile_path: Path | None = None

    def start_profile(self, path: Path) -> None:
        """Sample this process with py-spy (installed in the venv) until ``stop_profile``."""
        pyspy = Path(sys.executable).parent / "py-spy"
        if not pyspy.exists():
            raise RuntimeError(f"--profile needs py-spy: {sys.executable} -m pip install py-spy")
        self.profile_path = path
        argv = [str(pyspy), "record", "--format", "raw", "--rate", "50", "--nonblocking"]
        self._profiler = subprocess.Popen(
            [*argv, "--pid", str(self.pid), "--output", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop_profile(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None and profiler.poll() is None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                profiler.wait(30)
            except subprocess.TimeoutExpired:
                profiler.kill()
                profiler.wait()


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def app_importable() -> bool:
    """Whether ``python -m machinepool run`` can start (the app wiring imports cleanly)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import machinepool.app"], capture_output=True, text=True
    )
    return probe.returncode == 0


def _ours(
    name: str,
    components: str,
    kubeconfig: Path,
    workdir: Path,
    user: str,
    *,
    app: bool,
    extra: tuple[str, ...] = (),
) -> Controller:
    port = free_port()
    common = [
        f"--components={components}",
        f"--kubeconfig={kubeconfig}",
        f"--name=machinepool-{name}",
        f"--metrics-bind-address=127.0.0.1:{port}",
    ]
    if app:
        argv = [sys.executable, "-m", "machinepool", "run", *common]
        argv += ["--no-leader-elect", "--log-level=WARNING", "--insecure-diagnostics"]
    else:
        argv = [sys.executable, str(RUNNER), *common]
    proc = Process(name, [*argv, *extra], workdir)
    proc.start()
    base = f"http://127.0.0.1:{port}"
    return Controller(name, proc, f"{base}/metrics", f"{base}/readyz", user)


def ours_core(kubeconfig: Path, workdir: Path, user: str) -> Controller:
    """``machinepool run --components core`` (bench runner if the app does not import)."""
    app = app_importable()
    if not app:
        print(f"warning: machinepool.app does not import; the core runs {RUNNER.name} instead")
    return _ours("core", "core", kubeconfig, workdir, user, app=app)


def infra(
    kubeconfig: Path,
    workdir: Path,
    user: str,
    heartbeat_seconds: float,
    concurrency: int = 0,
    *,
    components: str = "bootstrap,sim,kubelet",
    name: str = "infra",
    lease_seconds: float = 0.0,
) -> Controller:
    """Bootstrap, Sim provider and node simulator, in the bench runner (see runner.py);
    ``components`` and ``name`` run a part of them in a process of its own. ``lease_seconds``
    [0: none] is each simulated kubelet's Node Lease renewal period, one write per Node per
    period (kubelet's 10 s at 10,000 Nodes: 1,000 writes a second, more than the rest of
    an idle fleet together), so a benchmark asks for Leases explicitly."""
    extra = (
        f"--heartbeat-seconds={heartbeat_seconds}",
        f"--concurrency={concurrency}",
        f"--lease-seconds={lease_seconds}",
    )
    return _ours(name, components, kubeconfig, workdir, user, app=False, extra=extra)


def kwok(binary: Path, kubeconfig: Path, workdir: Path, lease_duration: int = 0) -> Controller:
    """kwok managing the Nodes annotated ``kwok.x-k8s.io/node: fake`` with its default node
    stages, which write a Node's status once and never again; with ``lease_duration`` > 0 it
    also keeps a Node Lease of that duration for each (``--node-lease-duration-seconds``)."""
    port = free_port()
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        f"--server-address=127.0.0.1:{port}",
        f"--config={workdir / 'kwok-none.yaml'}",
    ]
    if lease_duration > 0:
        argv.append(f"--node-lease-duration-seconds={lease_duration}")
    (workdir / "kwok-none.yaml").write_text("")
    proc = Process("kwok", argv, workdir)
    proc.start()
    base = f"http://127.0.0.1:{port}"
    return Controller("kwok", proc, f"{base}/metrics", f"{base}/healthz", "kwok")


def build_upstream() -> Path:
    """Path of upstream's core manager binary, built first if the cache lacks it."""
    return upstream.build("manager")


def controlplane_binaries() -> Path:
    """Folder of control-plane binaries whose kube-apiserver reports its real version (upstream's
    manager refuses an unversioned one); both runs use it so they differ only in the core."""
    return upstream.build("controlplane")


def upstream_core(binary: Path, kubeconfig: Path, workdir: Path, user: str) -> Controller:
    diagnostics, health = free_port(), free_port()
    argv = upstream.manager_argv(
        binary,
        kubeconfig,
        machine_pool=True,
        health_port=health,
        diagnostics_port=diagnostics,
        webhook=upstream.UpstreamWebhook.create(workdir),
    )
    proc = Process("upstream-core", argv, workdir)
    proc.start()
    return Controller(
        "upstream-core",
        proc,
        f"http://127.0.0.1:{diagnostics}/metrics",
        f"http://127.0.0.1:{health}/readyz",
        user,
    )
