"""Fixtures of the reliability suite.

- ``--reliability-scale=N`` (or ``$RELIABILITY_SCALE``; default 1, the CI size) multiplies
  kill counts, fault rounds and generated inputs. Larger runs:
  ``pytest tests/reliability --reliability-scale=10``.
- ``scale``: that number.
- ``logs``: one folder for every process log the suite writes (scanned for secrets).
- ``env``: a namespace with the test's workload cluster registered as Cluster ``work``, a
  ``World`` watching both clusters, and controller processes stopped at the end.
- ``report``: ``report.record(figure, value)`` keeps a figure the test measured; with
  ``--reliability-report=PATH`` (or ``$MACHINEPOOL_RELIABILITY_REPORT``) the session writes
  them all to PATH with the git revision and the command (see report.py).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.reliability.harness import Env, World
from tests.reliability.report import FIGURES, REPORT_ENV, Recorder, report_path
from tests.support.builders import CLUSTER

from machinepool.controlplane import ControlPlane, WorkloadCluster
from machinepool.controlplane.register import register_workload_cluster
from machinepool.runtime import Client


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reliability-scale",
        type=int,
        default=None,
        help="Multiply reliability kill counts, fault rounds and generated inputs (default 1).",
    )
    parser.addoption(
        "--fault-pools", type=int, default=None, help="Pools in test_scale_faults.py (4)."
    )
    parser.addoption(
        "--fault-pool-size",
        type=int,
        default=None,
        help="Replicas per pool in test_scale_faults.py (10; full size 20 x 50).",
    )
    parser.addoption(
        "--reliability-report",
        default=None,
        help=f"Write the figures the scenarios record to this markdown file (${REPORT_ENV}).",
    )


def _report_path(config: pytest.Config) -> Path | None:
    return report_path(config.getoption("--reliability-report", default=None))


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Recorder:
    """Where the test records the figures it measured (kept in the report file on request)."""
    return Recorder(FIGURES.scenario(request.node.nodeid))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """How each scenario ended and how long its body ran: figures of a failed run say so."""
    if report.when == "call" or report.failed or report.skipped:
        scenario = FIGURES.scenario(report.nodeid)
        if report.when == "call":
            scenario.seconds = report.duration
        if scenario.outcome in ("not run", "passed"):
            scenario.outcome = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    """One process: write the report. A pytest-xdist worker: hand its figures on instead
    (the controller writes them all: tests/conftest.py)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reliability_figures"] = FIGURES.worker_output()
    elif (path := _report_path(session.config)) is not None:
        FIGURES.write(path)


SCALE_FAULTS_BUDGET = 5400.0
"""Seconds for test_scale_faults.py beyond CI size: its own waits (ready, create, roll,
restart, settle) add up to 80 minutes, so one of them, which names what did not happen,
fails before pytest-timeout's suite-wide 600 s would cut the run off with no verdict."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give a larger-than-CI faults-at-scale run the time its own waits allow."""
    pools = _int_option(config, "--fault-pools", "RELIABILITY_POOLS", 4)
    size = _int_option(config, "--fault-pool-size", "RELIABILITY_POOL_SIZE", 10)
    if pools * size <= 4 * 10:
        return
    for item in items:
        if item.nodeid.split("::")[0].endswith("test_scale_faults.py"):
            item.add_marker(pytest.mark.timeout(SCALE_FAULTS_BUDGET))


def _int_option(config: pytest.Config, option: str, env: str, default: int) -> int:
    value = config.getoption(option, default=None)
    if value is None:
        value = int(os.environ.get(env, str(default)))
    return max(1, int(value))


@pytest.fixture(scope="session")
def fault_pools(pytestconfig: pytest.Config) -> int:
    """Pools in test_scale_faults.py: ``--fault-pools`` or ``$RELIABILITY_POOLS`` [4]."""
    return _int_option(pytestconfig, "--fault-pools", "RELIABILITY_POOLS", 4)


@pytest.fixture(scope="session")
def fault_pool_size(pytestconfig: pytest.Config) -> int:
    """Replicas per pool there: ``--fault-pool-size`` or ``$RELIABILITY_POOL_SIZE`` [10]."""
    return _int_option(pytestconfig, "--fault-pool-size", "RELIABILITY_POOL_SIZE", 10)


@pytest.fixture(scope="session")
def scale(pytestconfig: pytest.Config) -> int:
    # getoption with a default: the option is only registered when this folder is collected
    # as an initial conftest (pytest tests/reliability ...).
    value = pytestconfig.getoption("--reliability-scale", default=None)
    if value is None:
        value = int(os.environ.get("RELIABILITY_SCALE", "1"))
    return max(1, int(value))


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``$RELIABILITY_LOGS`` keeps them somewhere pytest's tmp rotation will not delete."""
    kept = os.environ.get("RELIABILITY_LOGS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept)
    return tmp_path_factory.mktemp("reliability-logs")


@pytest_asyncio.fixture(loop_scope="session")
async def env(
    client: Client,
    namespace: str,
    workload: WorkloadCluster,
    control_plane: ControlPlane,
    crds: list[str],
    logs: Path,
) -> AsyncIterator[Env]:
    await register_workload_cluster(client, CLUSTER, namespace, workload)
    async with await Client.from_kubeconfig(workload.kubeconfig) as workload_client:
        world = await World.start(client, workload_client, namespace)
        environment = Env(
            client, namespace, control_plane.kubeconfig, workload.kubeconfig, world, logs
        )
        try:
            yield environment
        finally:
            await world.stop()
            await environment.release()
