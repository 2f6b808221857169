"""The infrastructure phase: adopt the infra pool, read readiness, map the workload's Nodes and
copy ``replicas`` and ``providerIDList`` from the provider.

Called by ``controller`` on every normal reconcile, after ``bootstrap``. Readiness is
``status.ready`` (v1beta1 contract) or ``status.initialization.provisioned``. An infra pool
that disappears after having been provisioned is a terminal failure, as upstream.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.conditions import mirror_v1beta1, set_v1beta1_condition
from machinepool.api.meta import dig, ensure
from machinepool.controllers.common import is_deleting, ref_text
from machinepool.controllers.machinepool import external, status
from machinepool.controllers.machinepool.scope import (
    ReferenceProblem,
    Scope,
    deprecated_v1beta1,
    set_v1beta1_counters,
)
from machinepool.runtime import NotFound, Obj, Result


def infra_ready(infra: Obj) -> bool:
    return bool(
        dig(infra, "status", "ready") is True
        or dig(infra, "status", "initialization", "provisioned") is True
    )


async def reconcile_infrastructure(scope: Scope) -> Result:
    """Own the infrastructure pool and copy its provider IDs, replicas and readiness."""
    mp = scope.mp
    ref = dig(mp, "spec", "template", "spec", "infrastructureRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        scope.infra_problem = "spec.template.spec.infrastructureRef is not set; set it"
        raise ReferenceProblem(f"{scope.text}: {scope.infra_problem}")
    init = ensure(mp, "status", "initialization")
    try:
        infra = await external.get_and_adopt(scope, ref)
    except NotFound as exc:
        scope.infra_pool_not_found = True
        _not_found(scope, ref)
        raise ReferenceProblem(str(exc)) from exc
    except ReferenceProblem as exc:
        scope.infra_problem = str(exc)
        _incorrect_ref(scope, str(exc))
        raise
    scope.infra_pool = infra
    external.copy_failures(scope, infra, str(ref.get("kind")))
    if is_deleting(infra):
        return Result()
    ready = infra_ready(infra)
    init["infrastructureProvisioned"] = ready
    mirror_v1beta1(
        status.v1beta1_conditions(mp),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        infra,
        ready,
        c.V1BETA1_WAITING_FOR_INFRASTRUCTURE_FALLBACK_REASON,
    )
    scope.nodes = await scope.reconciler.workload_nodes(scope)
    if not ready:
        return Result()
    _copy_from_provider(scope, infra)
    return Result()


def _copy_from_provider(scope: Scope, infra: Obj) -> None:
    mp = scope.mp
    raw_ids = dig(infra, "spec", "providerIDList", default=[])
    provider_ids = [str(p) for p in raw_ids] if isinstance(raw_ids, list) else []
    replicas = dig(infra, "status", "replicas")
    if isinstance(replicas, int):
        mp["status"]["replicas"] = replicas
    if not provider_ids and mp["status"].get("replicas", 0) != 0:
        return  # the provider has instances but has not listed them yet
    scope.provider_ids_observed = True
    if (dig(mp, "spec", "providerIDList", default=[]) or []) == provider_ids:
        return
    if provider_ids:
        mp["spec"]["providerIDList"] = provider_ids
    else:  # left out when empty, as upstream's omitempty list is
        mp["spec"].pop("providerIDList", None)
    replicas = int(mp["status"].get("replicas") or 0)
    set_v1beta1_counters(mp, ready=0, available=0, unavailable=replicas)


def _not_found(scope: Scope, ref: Obj) -> None:
    mp = scope.mp
    text = ref_text(str(ref.get("kind")), scope.namespace, str(ref.get("name")))
    if dig(mp, "status", "initialization", "infrastructureProvisioned"):
        v1 = deprecated_v1beta1(mp)
        v1["failureReason"] = "InvalidConfiguration"
        v1["failureMessage"] = (
            f"MachinePool infrastructure resource {text} has been deleted after being ready"
        )
    kind, name = ref.get("kind"), ref.get("name")
    _incorrect_ref(scope, f"could not find infra reference of kind {kind} with name {name}")


def _incorrect_ref(scope: Scope, message: str) -> None:
    set_v1beta1_condition(
        status.v1beta1_conditions(scope.mp),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        False,
        c.V1BETA1_INCORRECT_EXTERNAL_REF_REASON,
        message,
        c.SEVERITY_ERROR,
    )
