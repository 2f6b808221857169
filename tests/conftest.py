"""Shared fixtures: one real management control plane per test session.

- ``control_plane``: etcd + kube-apiserver + kube-controller-manager, started once.
- ``client``: an async raw-JSON client for the management cluster.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``workload``: a fresh workload cluster (its own kube-apiserver on the shared etcd).
- ``workload_pods``: ``None``, or the ``PodLifecycle`` the ``workload`` is started with; a test
  module whose Pods must be scheduled, replaced or evicted as in a user's cluster overrides it
  (the scheduler, and the node lifecycle, pod GC, Deployment and ReplicaSet controllers).
- ``workload_node_auth``: ``None``, or the ``NodeAuth`` the ``workload`` is started with (the
  Node authorizer, NodeRestriction, kubelet CSRs approved and signed); a module overrides it.
- ``crds``: every CRD machinepool generates, installed once and Established.
- ``cert_manager_api``: a function that installs stand-ins of cert-manager's API on a cluster.

Tests marked ``autoscaler``, ``clusterctl``, ``certmanager`` or ``capa`` run a real binary
built outside the repo (``hack/<tool>/build.sh``, or ``bench/upstream/build.sh capa`` for
Cluster API Provider AWS's manager; ``make clients`` runs them before the session); tests
marked ``capa_crds`` install CAPA's CRDs, fetched by ``hack/capa/crds.sh``; tests marked
``image`` build and run the controller image (``hack/image/build.sh``, run by
``make test-image``), and ``previous_release`` the previous release's (``hack/image/build.sh
machinepool-previous``). They are part of the default run whenever that binary (or image) can be
had; when it cannot (no source, no binary, no Go; for the image, not root or no apt-get), the
session leaves them out and says so in one line at the end, with what would include them.
Selecting the marker with ``-m`` keeps them regardless, so a missing binary fails loudly; under
``CI=true`` any tier left out fails the run.
Tests marked ``realnode`` run a real kubelet, containerd and kube-proxy
(``ControlPlane(node=RealNode())``); they are left out the same way, with the one line
``missing_prerequisites`` gives (not root, a Debian package missing), unless ``-m`` names them.

Nothing here mocks the Kubernetes API: tests talk to real binaries over HTTPS.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tests.reliability.report import FIGURES, report_path
from tests.support import wait_established
from tests.support.tasks import TaskTracker, cancel, describe

from machinepool.api.crdgen import crd_manifests
from machinepool.controlplane import (
    ControlPlane,
    NodeAuth,
    PodLifecycle,
    WorkloadCluster,
    missing_prerequisites,
)
from machinepool.runtime.kube.client import CRDS, NAMESPACES, Client

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RealBinary:
    """A client binary some tests run, built by a script that can say whether it can be had."""

    marker: str
    binary: str
    build: Path
    include: str
    """What a user does to include the tests when the binary cannot be had."""
    target: str = ""
    """The build script's target, for a script that builds several binaries."""

    @property
    def build_command(self) -> str:
        script = self.build.relative_to(REPO)
        return f"bash {script}" + (f" {self.target}" if self.target else "")

    def available(self) -> bool:
        """``build.sh --check [target]``: a binary is given, cached, or buildable here."""
        argv = ["bash", str(self.build), "--check", *([self.target] if self.target else [])]
        check = subprocess.run(argv, check=False)
        return check.returncode == 0


REAL_BINARIES = (
    RealBinary(
        "autoscaler",
        "cluster-autoscaler",
        REPO / "hack" / "autoscaler" / "build.sh",
        "set CLUSTER_AUTOSCALER_SRC to a copy of ../shared/third_party/cluster-autoscaler-1.34.5 "
        "(or CLUSTER_AUTOSCALER to a binary)",
    ),
    RealBinary(
        "clusterctl",
        "clusterctl",
        REPO / "hack" / "clusterctl" / "build.sh",
        "install Go (it is built from the module proxy) or set CLUSTERCTL to a binary",
    ),
    RealBinary(
        "capa_crds",
        "CAPA CRDs",
        REPO / "hack" / "capa" / "crds.sh",
        "install Go (CAPA's module comes from the module proxy) or set CAPA_DIR to its source",
    ),
    RealBinary(
        "image",
        "controller image",
        REPO / "hack" / "image" / "build.sh",
        "run as root on Debian (mmdebstrap, umoci, skopeo and runc come from apt-get)",
    ),
    RealBinary(
        "previous_release",
        "the previous release's image",
        REPO / "hack" / "image" / "build.sh",
        "run as root on Debian in a clone with the history (deploy/releases.yaml names the "
        "commit it is built from)",
        target="machinepool-previous",
    ),
    RealBinary(
        "certmanager",
        "cert-manager",
        REPO / "hack" / "certmanager" / "build.sh",
        "set CERT_MANAGER_SRC to a copy of ../shared/third_party/cert-manager-v1.20.3",
    ),
    RealBinary(
        "capa",
        "Cluster API Provider AWS manager",
        REPO / "bench" / "upstream" / "build.sh",
        "install Go (it is built from the module proxy: `bench/upstream/build.sh capa`)",
        target="capa",
    ),
)
_LEFT_OUT = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the tests of a real binary that cannot be had, unless ``-m`` names it.

    This hook sees the whole session's items, so it only ever drops items marked here.
    """
    notes: list[str] = []
    selected = config.getoption("markexpr", "") or ""
    for real in REAL_BINARIES:
        marked = [i for i in items if i.get_closest_marker(real.marker) is not None]
        if not marked or real.marker in selected or real.available():
            continue
        config.hook.pytest_deselected(items=marked)
        items[:] = [i for i in items if i.get_closest_marker(real.marker) is None]
        notes.append(
            f"left out {len(marked)} test(s) of the real {real.binary} (cannot be had here): "
            f"to include them, {real.include}; it is built by `{real.build_command}`"
        )
    marked = [i for i in items if i.get_closest_marker("realnode") is not None]
    if marked and "realnode" not in selected and (problem := missing_prerequisites()):
        config.hook.pytest_deselected(items=marked)
        items[:] = [i for i in items if i.get_closest_marker("realnode") is None]
        notes.append(f"left out {len(marked)} test(s) of the real node: {problem}")
    config.stash[_LEFT_OUT] = notes
    items.sort(key=_suite_rank)  # stable: each suite keeps its own order


SUITES_LONGEST_FIRST = ("reliability", "e2e", "conformance", "integration", "unit")
"""The order suites run in. pytest-xdist (``--dist loadfile --no-loadscope-reorder``, as the
Makefile runs it) hands a worker whole files in collection order, as each asks for more, so
minutes-long files handed out last would keep one worker busy while the other idles; the short
ones last even out the end. (Its default order, most tests first, put the reliability files,
a few long tests each, last.)"""


TIERS_FIRST = frozenset({*(real.marker for real in REAL_BINARIES), "realnode"})
"""Markers of the tests that run a real binary, image or node: within their suite their files
go out first. They are among the suite's longest (an image built and run, a real kubelet, a
foreign manager), and one handed out last would keep its worker busy while the other idles."""


def _suite_rank(item: pytest.Item) -> tuple[int, int]:
    suite = item.path.relative_to(REPO / "tests").parts[0]
    rank = SUITES_LONGEST_FIRST.index(suite) if suite in SUITES_LONGEST_FIRST else 0
    tier = any(item.get_closest_marker(marker) is not None for marker in TIERS_FIRST)
    return rank, 0 if tier else 1


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, hand the notes to the controller, which collected nothing.

    Under ``CI=true`` a left-out tier fails the run: CI has every prerequisite (``.ci/run``
    installs the packages and takes the third-party sources from ``../shared/``), so a binary
    that could not be had there is a broken build, not a machine without it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["left_out"] = session.config.stash.get(_LEFT_OUT, [])
        return
    if os.environ.get("CI") == "true" and session.config.stash.get(_LEFT_OUT, []):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if session.config.getoption("numprocesses", None) and (path := report_path()) is not None:
        FIGURES.write(path)  # every worker's reliability figures (tests/reliability/report.py)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: keep each worker's notes once (every worker collects all),
    and the reliability figures of the files it ran."""
    notes = node.config.stash.setdefault(_LEFT_OUT, [])
    output = getattr(node, "workeroutput", {})
    for note in output.get("left_out", []):
        if note not in notes:
            notes.append(note)
    FIGURES.merge(output.get("reliability_figures", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    notes = terminalreporter.config.stash.get(_LEFT_OUT, [])
    for note in notes:
        terminalreporter.write_line(note, yellow=True)
    if notes and os.environ.get("CI") == "true":
        terminalreporter.write_line("CI=true: a tier left out fails the run", red=True)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def client(control_plane: ControlPlane) -> AsyncIterator[Client]:
    async with await Client.from_kubeconfig(control_plane.kubeconfig) as c:
        yield c


@pytest_asyncio.fixture(loop_scope="session")
async def namespace(client: Client) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    await client.delete(NAMESPACES, name)


@pytest.fixture
def workload_pods() -> PodLifecycle | None:
    """No scheduler and no node lifecycle controller: most tests need no Pods scheduled, and
    the node lifecycle controller would judge Nodes by Leases that not every test renews."""
    return None


@pytest.fixture
def workload_node_auth() -> NodeAuth | None:
    """Kubelets are not confined to their own Node: the node simulator writes Nodes with the
    admin client unless a module turns on TLS bootstrap, which needs this."""
    return None


@pytest.fixture
def pool_node_taints() -> bool:
    """The core's ``MachinePoolNodeTaints`` gate for the controllers a harness runs (the e2e
    ``system``, the controllers' ``env``): off, as by default; a test turns it on with
    ``@pytest.mark.parametrize("pool_node_taints", [True])``."""
    return False


@pytest.fixture
def workload(
    control_plane: ControlPlane,
    workload_pods: PodLifecycle | None,
    workload_node_auth: NodeAuth | None,
) -> Iterator[WorkloadCluster]:
    name = f"w-{uuid.uuid4().hex[:8]}"
    cluster = control_plane.start_workload(name, pods=workload_pods, node_auth=workload_node_auth)
    try:
        yield cluster
    finally:
        control_plane.stop_workload(name)


def cert_manager_stand_in(kind: str, plural: str) -> dict[str, Any]:
    """A schema-less CRD for one cert-manager.io/v1 kind.

    cert-manager runs pods, which nothing here can run; its API is what the shipped manifests
    (Issuer, Certificate) and ``clusterctl init`` (a test Issuer and Certificate) need.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def install_cert_manager_api(client: Client) -> None:
    """cert-manager's Issuer and Certificate kinds (stand-ins), Established."""
    for kind, plural in (("Issuer", "issuers"), ("Certificate", "certificates")):
        crd = cert_manager_stand_in(kind, plural)
        await client.apply(CRDS, crd, field_manager="machinepool-tests")
        await wait_established(client, str(crd["metadata"]["name"]))


@pytest.fixture(scope="session")
def cert_manager_api() -> Callable[[Client], Awaitable[None]]:
    """``await cert_manager_api(client)`` installs cert-manager's API on that cluster."""
    return install_cert_manager_api


async def install_crds(client: Client) -> list[str]:
    """Server-side apply every generated CRD and wait until each is Established."""
    names = []
    for crd in crd_manifests():
        await client.apply(CRDS, crd, field_manager="machinepool-tests")
        names.append(crd["metadata"]["name"])
    for name in names:
        await wait_established(client, name)
    return names


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def crds(client: Client) -> list[str]:
    return await install_crds(client)


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def task_tracker() -> TaskTracker:
    """Installed first thing on the session's loop, so it sees every fixture's tasks born."""
    return TaskTracker.of(asyncio.get_running_loop())


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def no_leaked_tasks(task_tracker: TaskTracker) -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks it started running after its teardown.

    Autouse and function-scoped, so it is set up after the session's and modules' fixtures
    and torn down after the test's own: what it finds is what the test and its fixtures left.
    Leaked tasks are cancelled so the next test starts clean.
    """
    mark = task_tracker.mark()
    yield
    leaked = await task_tracker.leaked(mark)
    if leaked:
        cancel(leaked)
        names = "\n  ".join(describe(t) for t in leaked)
        pytest.fail(f"{len(leaked)} asyncio task(s) the test started still run:\n  {names}")
