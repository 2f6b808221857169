"""The token phase: make sure the data Secret will carry a bootstrap token that works.

Upstream's rules (``refreshBootstrapTokenIfNeeded`` / ``rotateMachinePoolBootstrapToken``):

- no token yet, or ours vanished: create one (valid ``token_ttl``);
- nothing has joined with it yet (a pool without nodeRefs, a Machine without a nodeRef, a
  standalone config): *refresh* it — extend its expiration to now + ttl once less than 5/6 of
  the ttl is left — so a slow first instance can still join;
- a pool that has Nodes: *rotate* once less than half the ttl is left — create a new token and
  let ``data.py`` rewrite the data Secret in place; the old token is left to expire (instances
  booting from the old data may still be joining), then deleted (by the workload cluster's
  token-cleaner, and by us: see ``delete_stale_config_tokens``);
- a Machine that has joined: nothing (its token is spent).

One token per config at any time, the one rotated out kept only through its window: a pass
that finds no token named on the data Secret takes the config's valid token, if it has one,
before it makes another (a pass whose render failed after the token was made wrote no data
Secret), and every pass deletes any other token of the config.

A token the user wrote into ``spec.joinConfiguration.discovery.bootstrapToken.token`` is used as
is and never rotated, refreshed or deleted. Unlike upstream we never write tokens into the
KubeadmConfig spec: anyone who may read KubeadmConfigs could read them there, and every rotation
would bump the generation. The current token's id is kept on the data Secret
(``DATA_TOKEN_ID_ANNOTATION``) and its value only in Secrets.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from machinepool.api import constants as c
from machinepool.api.views import MachinePoolView, MachineView
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.prerequisites import POLL_SECONDS
from machinepool.bootstrap.kubeadm.scope import Scope
from machinepool.bootstrap.kubeadm.tokens import (
    BootstrapToken,
    create_token,
    delete_stale_config_tokens,
    expiration_of,
    get_token,
    needs_refresh,
    needs_rotation,
    newest_config_token,
    parse_token,
    refresh_token,
)
from machinepool.runtime import Client, ClusterNotConnected, Conflict, NotFound, Result

_SLACK = timedelta(seconds=0.5)
"""Wake a little after a deadline so expirations written in whole seconds are past it."""


def consumed(scope: Scope) -> bool:
    """Whether an instance has joined with this config (upstream's ``HasNodeRefs``)."""
    owner = scope.owner
    if scope.owner_kind == "MachinePool" and isinstance(owner, MachinePoolView):
        return bool(owner.status.node_refs)
    if scope.owner_kind == "Machine" and isinstance(owner, MachineView):
        return bool(owner.status.node_ref.raw)
    return False


def _file_discovery(scope: Scope) -> bool:
    join = (scope.model.spec and scope.model.spec.join_configuration) or None
    return bool(join and join.discovery and join.discovery.file)


def current_token_id(scope: Scope) -> str:
    annotations = ((scope.data_secret or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(r.DATA_TOKEN_ID_ANNOTATION, ""))


async def reconcile_token(scope: Scope) -> Result:
    """Fill ``scope.token`` (creating, refreshing or rotating as above)."""
    if _file_discovery(scope):
        return Result()
    if user_token := scope.user_token:
        try:
            scope.token = parse_token(user_token)
        except ValueError as exc:
            scope.mark(
                r.DATA_SECRET_AVAILABLE,
                False,
                r.GENERATION_FAILED,
                f"spec.joinConfiguration.discovery.bootstrapToken.token: {exc}; remove it to let"
                " the controller create tokens",
                c.SEVERITY_WARNING,
            )
            scope.halt = True
        return Result()
    try:
        workload = await scope.cluster_cache.get_client(scope.cluster_key)
    except ClusterNotConnected as exc:
        scope.wait(r.WAITING_FOR_WORKLOAD_CLUSTER, str(exc), c.SEVERITY_WARNING)
        return Result(requeue_after=POLL_SECONDS)
    after = await _ensure_token(scope, workload)
    await _collect_stale(scope, workload)
    return Result(requeue_after=after.total_seconds())


async def _ensure_token(scope: Scope, workload: Client) -> timedelta:
    """Set ``scope.token``; return when the token needs looking at again."""
    ttl = scope.options.token_ttl
    check = ttl / 3
    token_id = current_token_id(scope)
    found = await get_token(workload, token_id) if token_id else None
    if found is None:
        if scope.owner_kind == "Machine" and consumed(scope) and scope.data_secret_created:
            scope.halt = True  # joined: the spent token may go; the data stays as it is
            return check
        # A token made by a pass whose data Secret was never written (its render failed, or
        # its write did), or the one a rotation kept: take it rather than make another.
        found = await newest_config_token(workload, scope.uid)
    if found is None:
        # The first token is the config's ordinary making (its status says it is ready); one
        # that went missing is news for the operator.
        reason = "BootstrapTokenCreated" if token_id else None
        scope.token = await _create(
            scope, workload, reason, "re-created" if token_id else "created"
        )
        return check
    token, secret = found
    scope.token = token
    expiration = expiration_of(secret)
    now = datetime.now(UTC)
    if consumed(scope):
        if not scope.pool_owned:
            return check
        if needs_rotation(expiration, ttl, now):
            scope.token = await _create(scope, workload, "BootstrapTokenRotated", "rotated")
            return min(check, ttl / 2 + _SLACK)
        assert expiration is not None  # needs_rotation is True for None
        return max(min(check, expiration - ttl / 2 - now + _SLACK), _SLACK)
    if needs_refresh(expiration, ttl, now):
        try:
            await refresh_token(workload, secret, ttl)
        except (NotFound, Conflict):
            scope.token = await _create(scope, workload, "BootstrapTokenCreated", "re-created")
            return check
        scope.log.info("extended bootstrap token", token_secret=token.secret_name)
    return check


async def _create(scope: Scope, workload: Client, reason: str | None, verb: str) -> BootstrapToken:
    """A new token; an Event of ``reason`` says so, unless it is None."""
    token = await create_token(workload, scope.options.token_ttl, str(scope.key), scope.uid)
    message = f"{verb} bootstrap token {token.secret_name} in workload cluster {scope.cluster_key}"
    scope.log.info(message, token_secret=token.secret_name)
    if reason is not None:
        await scope.recorder.event(scope.config.raw, "Normal", reason, message)
    return token


async def _collect_stale(scope: Scope, workload: Client) -> None:
    """Delete this config's tokens but the current one and, through a pool's rotation window,
    the one it replaced (best effort: the token-cleaner deletes expired ones too)."""
    current = scope.token.id if scope.token is not None else ""
    keep_previous = scope.pool_owned and consumed(scope)
    try:
        deleted = await delete_stale_config_tokens(
            workload, scope.uid, current, keep_previous=keep_previous
        )
    except Exception as exc:
        scope.log.warning("could not delete stale bootstrap tokens", error=repr(exc))
        return
    for name in deleted:
        scope.log.info("deleted stale bootstrap token", token_secret=name)
