"""The ``machinepool`` command line.

Local environment: ``up``, ``down``, ``status``, ``wipe``, ``demo``; the controller process:
``run``; pools on any cluster: ``get pools``, ``describe pool``, ``scale``, ``rollout status``,
``timeline``. Failures print one line and exit non-zero; no tracebacks for expected errors.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from typer.core import TyperCommand

from machinepool.cli import local, pools
from machinepool.cli.kube import CliError, Target, resolve_kubeconfig
from machinepool.controlplane import BinariesNotFound, ProcessFailed

if TYPE_CHECKING:  # the click that typer builds commands with (typer 0.29 vendors its own)
    from typer._click import Context, Parameter

HELP = """Cluster API's MachinePool system.

Local environment: up, down, status, wipe, demo. The controller process: run. Pools on any
cluster: get pools, describe pool, scale, rollout status, timeline. Beside upstream Cluster
API: upstream hand-back. Our AWS provider: aws move-group.
"""
"""What --help shows: plain text (docstrings here are for readers of the code)."""

app = typer.Typer(no_args_is_help=True, add_completion=False, help=HELP)
get_app = typer.Typer(no_args_is_help=True, help="List objects.")
describe_app = typer.Typer(no_args_is_help=True, help="Show one object in depth.")
rollout_app = typer.Typer(no_args_is_help=True, help="Follow rollouts.")
upstream_app = typer.Typer(no_args_is_help=True, help="Share a cluster with upstream Cluster API.")
aws_app = typer.Typer(no_args_is_help=True, help="Our AWS infrastructure provider.")
app.add_typer(get_app, name="get")
app.add_typer(describe_app, name="describe")
app.add_typer(rollout_app, name="rollout")
app.add_typer(upstream_app, name="upstream")
app.add_typer(aws_app, name="aws")

# Wide enough for the pool table when output is not a terminal (CI logs, pipes).
console = Console(width=None if Console().is_terminal else 160)
err = Console(stderr=True)
T = TypeVar("T")

KubeconfigOpt = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG).")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")]
HomeOpt = Annotated[
    Path | None,
    typer.Option(
        "--home", help="Local environment state (default: $MACHINEPOOL_HOME or ~/.machinepool)."
    ),
]


def _target(kubeconfig: Path | None, context: str | None, namespace: str) -> Target:
    return Target(resolve_kubeconfig(kubeconfig), context, namespace)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``; a ``CliError`` becomes one red line and exit code 1."""
    try:
        return asyncio.run(coro)
    except CliError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (BinariesNotFound, ProcessFailed, RuntimeError, TimeoutError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


# -- the controller process ----------------------------------------------------------------


_COMPONENT_FLAGS = "machinepool.component_flags"
"""``ctx.meta`` key: the component-option flags given to ``run``, by field name."""


@functools.cache
def _component_params() -> tuple[Parameter, ...]:
    """One option per component option (``machinepool.app.FLAGS``), in a panel of their own,
    unset by default so the dataclass default applies. Typer makes them, as it makes the
    others, from a signature: here one built from ``FLAGS`` rather than written out."""
    from machinepool.app import FLAGS

    params: list[inspect.Parameter] = []
    for flag in FLAGS:
        if flag.type is bool:
            shown = "on" if flag.default else "off"
        elif isinstance(flag.default, tuple):
            shown = ",".join(flag.default)
        else:
            shown = str(flag.default)
        option = typer.Option(
            None,
            flag.name,
            help=f"{flag.help} ({flag.component}; default: {shown})",
            rich_help_panel="Component options",
        )
        kind = flag.type if flag.type in (bool, int, float) else str
        params.append(
            inspect.Parameter(
                flag.field, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind | None
            )
        )

    def component_options(**_: object) -> None:
        """Only its signature is read."""

    component_options.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    holder = typer.Typer(add_completion=False)
    holder.command()(component_options)
    return tuple(typer.main.get_command(holder).params)


class _RunCommand(TyperCommand):
    """``run`` with the component-option flags added when ``run`` itself is parsed or helped,
    not when the CLI starts: they come from every component's package, whose import costs
    about a second that the other commands should not pay."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return [*super().get_params(ctx), *_component_params()]

    def invoke(self, ctx: Context) -> Any:
        from machinepool.app import FLAGS

        given = {f.field: ctx.params.pop(f.field, None) for f in FLAGS}
        ctx.meta[_COMPONENT_FLAGS] = {k: v for k, v in given.items() if v is not None}
        return super().invoke(ctx)


@app.command(cls=_RunCommand)
def run(
    ctx: typer.Context,
    components: Annotated[str, typer.Option(help="Comma-separated components to run.")] = (
        "core,bootstrap,sim"
    ),
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    name: Annotated[str, typer.Option(help="Manager and Lease name.")] = "machinepool-controller",
    leader_elect: Annotated[bool, typer.Option(help="Take a Lease before acting.")] = True,
    leader_election_namespace: Annotated[str, typer.Option()] = "kube-system",
    leader_elect_lease_duration: Annotated[
        float, typer.Option(help="Seconds a silent leader's Lease stays valid.")
    ] = 15.0,
    leader_elect_renew_deadline: Annotated[
        float, typer.Option(help="Seconds a leader keeps failing renewals before giving up.")
    ] = 10.0,
    leader_elect_retry_period: Annotated[
        float, typer.Option(help="Seconds between attempts to take or renew the Lease.")
    ] = 2.0,
    metrics_bind_address: Annotated[
        str,
        typer.Option(
            "--metrics-bind-address",
            "--diagnostics-address",
            help="/metrics and probes: HTTPS, /metrics for authorized callers only.",
        ),
    ] = "127.0.0.1:8080",
    insecure_diagnostics: Annotated[
        bool,
        typer.Option(
            "--insecure-diagnostics",
            help="Serve /metrics and probes as plain HTTP without authentication (local runs).",
        ),
    ] = False,
    diagnostics_cert_dir: Annotated[
        Path | None,
        typer.Option(help="Folder with tls.crt and tls.key for /metrics (default: self-signed)."),
    ] = None,
    health_probe_bind_address: Annotated[
        str, typer.Option(help="A separate plain-HTTP listener for /healthz and /readyz.")
    ] = "",
    webhook_port: Annotated[int | None, typer.Option(help="Serve webhooks on this port.")] = None,
    webhook_host: Annotated[str, typer.Option(help="Address the webhook server binds.")] = (
        "127.0.0.1"
    ),
    webhook_cert_dir: Annotated[
        Path | None, typer.Option(help="Folder with tls.crt and tls.key for the webhooks.")
    ] = None,
    register_webhooks: Annotated[
        bool, typer.Option(help="Point webhook configurations at this process (local runs).")
    ] = False,
    feature_gates: Annotated[str, typer.Option(help="For example MachinePool=true.")] = "",
    watch_filter: Annotated[
        str | None,
        typer.Option(
            help="Reconcile only Cluster API objects labelled cluster.x-k8s.io/watch-filter "
            "with this value (unset: all objects)."
        ),
    ] = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(help="Watch only this namespace; repeat for several (unset: all)."),
    ] = None,
    sharding: Annotated[
        bool,
        typer.Option(
            help="Be one replica of a sharded manager: Clusters are divided among the live "
            "replicas of --name automatically."
        ),
    ] = False,
    shard_name: Annotated[
        str | None, typer.Option(help="This replica's shard (default: hostname + suffix).")
    ] = None,
    log_format: Annotated[str, typer.Option(help="text or json.")] = "text",
    log_level: Annotated[str, typer.Option()] = "INFO",
) -> None:
    """Run controllers (what the container image runs).

    Besides the flags of the process, each component's options are flags (the ones after
    --log-level): a component reads its own when it runs and ignores the others.
    """
    from machinepool.app import LeaseTiming, Options, component_options
    from machinepool.app import run as run_process

    if (
        not 0
        < leader_elect_retry_period
        < leader_elect_renew_deadline
        < leader_elect_lease_duration
    ):
        raise typer.BadParameter(
            "needs 0 < --leader-elect-retry-period < --leader-elect-renew-deadline"
            " < --leader-elect-lease-duration"
        )

    run_process(
        Options(
            **component_options(ctx.meta[_COMPONENT_FLAGS]),
            components=tuple(c.strip() for c in components.split(",") if c.strip()),
            kubeconfig=kubeconfig,
            context=context,
            name=name,
            leader_elect=leader_elect,
            leader_election_namespace=leader_election_namespace,
            lease_timing=LeaseTiming(
                leader_elect_lease_duration, leader_elect_renew_deadline, leader_elect_retry_period
            ),
            metrics_bind_address=metrics_bind_address,
            insecure_diagnostics=insecure_diagnostics,
            diagnostics_cert_dir=diagnostics_cert_dir,
            health_probe_bind_address=health_probe_bind_address,
            webhook_port=webhook_port,
            webhook_host=webhook_host,
            webhook_cert_file=webhook_cert_dir / "tls.crt" if webhook_cert_dir else None,
            webhook_key_file=webhook_cert_dir / "tls.key" if webhook_cert_dir else None,
            register_webhooks=register_webhooks,
            feature_gates=feature_gates,
            watch_filter=watch_filter or None,
            namespaces=tuple(namespace or ()),
            sharding=sharding,
            shard_name=shard_name or None,
            log_format=log_format,
            log_level=log_level,
        )
    )


# -- local environment ---------------------------------------------------------------------


def _print_state(state: local.State) -> None:
    console.print(f"management kubeconfig: {state.kubeconfig}")
    console.print(f"workload kubeconfig:   {state.workload_kubeconfig}  (Cluster {state.cluster})")


@app.command()
def up(home: HomeOpt = None) -> None:
    """Start the local management cluster, a workload cluster and all controllers."""
    home = home or local.default_home()
    state = _guard(lambda: local.up(home))
    console.print(f"[green]up[/green] (state in {home})")
    _print_state(state)


@app.command()
def down(home: HomeOpt = None) -> None:
    """Stop everything 'up' started (its data stays for the next 'up'; see 'wipe')."""
    home = home or local.default_home()
    console.print("stopped" if local.down(home) else "nothing was running")


@app.command()
def wipe(home: HomeOpt = None) -> None:
    """Delete the local environment's data (clusters, certificates, logs) for a clean start."""
    home = home or local.default_home()
    removed = _guard(lambda: local.wipe(home))
    console.print(f"removed {len(removed)} item(s) from {home}" if removed else "nothing to wipe")


@app.command()
def status(home: HomeOpt = None) -> None:
    """Say what runs locally and where its logs are."""
    home = home or local.default_home()
    state = local.running_state(home)
    if state is None:
        console.print("not running (start it with: machinepool up)")
        raise typer.Exit(1)
    console.print(f"running: supervisor pid {state.pid}, state in {home}")
    _print_state(state)
    for proc, pid in sorted(state.processes.items()):
        mark = "[green]running[/green]" if local.alive(pid) else "[red]stopped[/red]"
        console.print(f"  {proc:<40} pid {pid:<8} {mark}  log {state.logs.get(proc, '-')}")


@app.command()
def demo(
    teardown: Annotated[bool, typer.Option(help="Stop everything at the end.")] = False,
    home: HomeOpt = None,
    replicas: Annotated[int, typer.Option(help="Initial pool size.")] = 3,
    scale_to: Annotated[int, typer.Option(help="Size after scaling.")] = 5,
    timeout: Annotated[float, typer.Option(help="Seconds each step may take.")] = 300.0,
    realistic: Annotated[
        bool,
        typer.Option(
            help="Instances boot in 20-60 s, as a cloud's VMs do, instead of 1-3 s; the"
            " steps take minutes."
        ),
    ] = False,
) -> None:
    """From nothing: bring everything up, create a pool, scale it, roll it to a new version."""
    from machinepool.cli.demo import run_demo

    home = home or local.default_home()
    state = _guard(lambda: local.up(home))
    _print_state(state)
    target = Target(Path(state.kubeconfig), None, local.CLUSTER_NAMESPACE)
    try:
        _run(
            run_demo(
                target,
                console,
                replicas=replicas,
                scale_to=scale_to,
                timeout=timeout,
                realistic=realistic,
            )
        )
    finally:
        if teardown:
            local.down(home)
            console.print("torn down")
    if not teardown:
        console.print(
            f"left running: kubectl --kubeconfig {state.kubeconfig} get mp -A   "
            "(stop with: machinepool down)"
        )


# -- pools ---------------------------------------------------------------------------------


@get_app.command("pools")
def get_pools(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A")] = False,
) -> None:
    """List MachinePools: desired, ready, up to date, versions, problems."""
    target = _target(kubeconfig, context, namespace)
    console.print(_run(pools.table(target, all_namespaces=all_namespaces)))


@describe_app.command("pool")
def describe_pool(
    name: str,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """A MachinePool as a tree: bootstrap config, infra pool, Machines, Nodes."""
    console.print(_run(pools.describe(_target(kubeconfig, context, namespace), name)))


@app.command()
def scale(
    name: str,
    replicas: Annotated[int, typer.Option("--replicas", help="Desired size.", min=0)],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Set a MachinePool's size through the scale subresource."""
    _run(pools.scale(_target(kubeconfig, context, namespace), name, replicas))
    console.print(f"machinepool/{name} scaled to {replicas}")


@rollout_app.command("status")
def rollout_status(
    name: str,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 600.0,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Follow a rollout until every replica is up to date and ready; non-zero on timeout."""
    done = _run(
        pools.rollout_status(_target(kubeconfig, context, namespace), name, timeout, console)
    )
    if not done:
        err.print(f"[red]error:[/red] rollout of machinepool/{name} not done after {timeout:.0f}s")
        raise typer.Exit(1)
    console.print(f"machinepool/{name} rolled out")


@app.command()
def timeline(
    name: str,
    output: Annotated[Path, typer.Option("-o", "--output", help="FILE.png or FILE.html")],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Ready nodes by version over time, from the pool's recorded history and Events."""
    from machinepool.cli.timeline import write_timeline

    if output.suffix not in (".png", ".html"):
        err.print("[red]error:[/red] --output must end in .png or .html")
        raise typer.Exit(2)
    points = _run(write_timeline(_target(kubeconfig, context, namespace), name, output))
    console.print(f"wrote {output} ({points} samples)")


# -- beside upstream Cluster API -----------------------------------------------------------


async def _hand_back(target: Target) -> str:
    from machinepool.cli.kube import connect
    from machinepool.webhooks import beside

    async with connect(target) as client:
        record = await beside.hand_back(client, target.namespace)
    if record is None:
        return f"nothing to hand back: no record {beside.RECORD_NAME} in {target.namespace}"
    entries = sum(len(e) for configs in record.entries.values() for e in configs.values())
    return (
        f"handed back {entries} MachinePool webhook(s) and the CRD's conversion to upstream; "
        "now stop our core, then turn upstream's MachinePool feature gate on"
    )


@upstream_app.command("hand-back")
def hand_back(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace", "-n", help="Where our core keeps its record (its Lease namespace)."
        ),
    ] = "machinepool-system",
) -> None:
    """Give MachinePool admission and conversion back to upstream Cluster API, exactly as they
    were before our core took them over (run before uninstalling ours, or to go back)."""
    console.print(_run(_hand_back(_target(kubeconfig, context, namespace))))


# -- our AWS provider ---------------------------------------------------------------------


async def _move_group(target: Target) -> str:
    from machinepool.api.infra_aws import GROUP
    from machinepool.cli import awsmove as migrate
    from machinepool.cli.kube import connect

    async with connect(target) as client:
        try:
            moved = await migrate.move_to_group(client, target.namespace)
        except migrate.MoveError as exc:
            raise CliError(str(exc)) from exc
    if not moved:
        return f"nothing to move: no AWSMachinePool of the old group in {target.namespace}"
    return f"moved {len(moved)} AWSMachinePool(s) to {GROUP}: {', '.join(moved)}"


@aws_app.command("move-group")
def move_group(
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    namespace: NamespaceOpt = "default",
) -> None:
    """Move the namespace's AWSMachinePools and AWSMachines made under the old group
    (infrastructure.cluster.x-k8s.io, CAPA's) to ours, with no instance replaced. Their
    Clusters must be paused; see the operator guide, "Moving AWS pools to the new group"."""
    console.print(_run(_move_group(_target(kubeconfig, context, namespace))))


def main() -> None:
    app()
