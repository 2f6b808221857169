"""The ``machinepool`` command line: local control plane, demo, and pool inspection."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from machinepool.controlplane import BinariesNotFound, ControlPlane, ProcessFailed
from machinepool.runtime.client import NAMESPACES, Client

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
console = Console()


async def _namespaces(kubeconfig: Path) -> list[str]:
    async with await Client.from_kubeconfig(kubeconfig) as client:
        return [ns["metadata"]["name"] for ns in (await client.list(NAMESPACES)).items]


@app.command()
def controlplane(
    workdir: Annotated[Path, typer.Option(help="Where state and logs go.")] = Path(
        ".local/controlplane"
    ),
) -> None:
    """Run a local management control plane in the foreground until Ctrl-C."""
    cp = ControlPlane(workdir.resolve())
    try:
        cp.start()
    except (BinariesNotFound, ProcessFailed) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    try:
        console.print(f"management cluster: {cp.url}")
        console.print(f"kubeconfig:         {cp.kubeconfig}")
        names = asyncio.run(_namespaces(cp.kubeconfig))
        console.print(f"it answers: namespaces {', '.join(sorted(names))}")
        console.print(f"try: kubectl --kubeconfig {cp.kubeconfig} get namespaces")
        console.print("Ctrl-C stops it.")
        stop_signals = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        signal.sigwait(stop_signals)
    finally:
        cp.stop()
        console.print("stopped")


@app.command()
def demo() -> None:
    """The main demo (for now: the local control plane, until Ctrl-C)."""
    controlplane(Path(".local/controlplane"))


def main() -> None:
    app()
