"""How CLI commands reach a cluster, and how API failures become one clear line.

Kubeconfig precedence: ``--kubeconfig``, then ``$KUBECONFIG``, then the local environment's
management cluster when ``machinepool up`` is running, then ``~/.kube/config``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from machinepool.api.kinds import MACHINE_POOLS
from machinepool.cli.local import default_home, running_state
from machinepool.runtime.kube.client import Client
from machinepool.runtime.kube.errors import ApiError, NotFound


class CliError(Exception):
    """A failure to report as one line and a non-zero exit, without a traceback."""


@dataclass(frozen=True)
class Target:
    """Which cluster and namespace a command works on."""

    kubeconfig: Path | None
    context: str | None
    namespace: str

    def describe(self) -> str:
        return str(self.kubeconfig or "the default kubeconfig")


def resolve_kubeconfig(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    if os.environ.get("KUBECONFIG"):
        return None  # kubernetes_asyncio reads it
    state = running_state(default_home())
    if state is not None and state.kubeconfig:
        return Path(state.kubeconfig)
    return None


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[Client]:
    """A client for ``target``; API and connection errors become ``CliError``."""
    try:
        client = await Client.from_kubeconfig(
            target.kubeconfig, context=target.context, user_agent="machinepool-cli"
        )
    except Exception as exc:  # kubeconfig missing or malformed
        raise CliError(f"cannot load kubeconfig {target.describe()}: {exc}") from exc
    try:
        async with client:
            yield client
    except NotFound as exc:
        raise CliError(exc.message or "not found") from exc
    except ApiError as exc:
        raise CliError(f"the API server said {exc.status} {exc.reason}: {exc.message}") from exc
    except (aiohttp.ClientConnectionError, TimeoutError, OSError) as exc:
        raise CliError(f"cannot reach the cluster at {client.host}: {exc}") from exc


async def get_pool(client: Client, name: str, namespace: str) -> dict[str, Any]:
    try:
        return await client.get(MACHINE_POOLS, name, namespace)
    except NotFound as exc:
        raise CliError(f'MachinePool "{name}" not found in namespace "{namespace}"') from exc
