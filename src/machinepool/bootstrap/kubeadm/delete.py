"""The delete phase: remove a deleted KubeadmConfig's bootstrap tokens and data Secret (and
an earlier version's finalizer, on a config that still holds it).

It runs on the config's last state once it is gone (``controller.Departed``). Tokens are
found by the config-UID label (``tokens.TOKEN_CONFIG_UID_LABEL``). When the workload cluster
cannot be reached we keep trying, except when it never can be again (its kubeconfig Secret is
gone) or when every token we made has expired anyway (refreshes stop at deletion, so after
one ``token_ttl`` nothing we created still authenticates).
"""

from __future__ import annotations

from datetime import UTC, datetime

from machinepool.api.meta import deleted_for_move
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.prerequisites import POLL_SECONDS
from machinepool.bootstrap.kubeadm.scope import Scope
from machinepool.bootstrap.kubeadm.tokens import delete_config_tokens
from machinepool.runtime import SECRETS, ClusterNotConnected, NotFound, Result, controller_owner


async def _kubeconfig_exists(scope: Scope) -> bool:
    try:
        await scope.client.get(SECRETS, f"{scope.cluster_name}-kubeconfig", scope.key.namespace)
    except NotFound:
        return False
    return True


def _tokens_expired(scope: Scope) -> bool:
    if scope.deleted_at is None:
        return False
    return datetime.now(UTC) - scope.deleted_at > scope.options.token_ttl


async def _delete_tokens(scope: Scope) -> bool:
    """Delete the config's tokens; ``False`` when the workload cluster must be retried."""
    if not scope.cluster_name:
        return True
    try:
        workload = await scope.cluster_cache.get_client(scope.cluster_key)
    except ClusterNotConnected as exc:
        if not await _kubeconfig_exists(scope) or _tokens_expired(scope):
            scope.log.info("workload cluster unreachable for good; leaving tokens to expire")
            return True
        scope.log.info("waiting for the workload cluster to delete tokens", error=str(exc))
        return False
    for name in await delete_config_tokens(workload, scope.uid):
        scope.log.info("deleted bootstrap token", token_secret=name)
    return True


async def _delete_data_secret(scope: Scope) -> None:
    try:
        secret = await scope.client.get(SECRETS, scope.key.name, scope.key.namespace)
    except NotFound:
        return
    owner = controller_owner(secret)
    if owner is None or owner.get("uid") != scope.uid:
        return  # not ours: leave it
    uid = secret["metadata"].get("uid")
    await scope.client.delete(SECRETS, scope.key.name, scope.key.namespace, uid=uid)
    scope.log.info("deleted bootstrap data secret", secret=scope.key.name)


async def delete(scope: Scope) -> Result:
    """Delete the bootstrap tokens and the data secret the config made, then drop an earlier
    version's finalizer if the config holds one. A config ``clusterctl move`` deleted lives on
    in the target management cluster: its tokens still join its pool's instances."""
    if deleted_for_move(scope.config.raw):
        scope.log.info("config moved by clusterctl move; its tokens stay")
    elif not await _delete_tokens(scope):
        return Result(requeue_after=POLL_SECONDS)
    else:
        # Garbage collection would also remove it; doing it here makes deletion complete at
        # once in clusters without a garbage collector.
        await _delete_data_secret(scope)
    release_finalizer(scope)
    return Result()


def release_finalizer(scope: Scope) -> None:
    """Drop the finalizer an earlier version set (``resources.FINALIZER``), if the config
    holds it: the cleanup follows the deletion now, and upstream's provider, should the
    cluster go back to it, would never release it."""
    finalizers = scope.config.metadata.finalizers or []
    if r.FINALIZER in finalizers:
        scope.config.metadata.finalizers = [f for f in finalizers if f != r.FINALIZER]
