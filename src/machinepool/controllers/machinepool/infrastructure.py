"""The infrastructure phase: adopt the infra pool, read readiness, map the workload's Nodes and
copy ``replicas`` and ``providerIDList`` from the provider.

Called by ``controller`` on every normal reconcile, after ``bootstrap``. Readiness is
``status.ready`` (v1beta1 contract) or ``status.initialization.provisioned``. An infra pool
that disappears after having been provisioned is a terminal failure, as upstream.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.conditions import mirror_v1beta1, set_v1beta1_condition
from machinepool.api.contract import InfraMachinePool
from machinepool.api.views import ReferenceView
from machinepool.controllers.common import ref_text
from machinepool.controllers.machinepool import external
from machinepool.controllers.machinepool.scope import (
    ReferenceProblem,
    Scope,
    set_v1beta1_counters,
)
from machinepool.runtime import NotFound, Result


async def reconcile_infrastructure(scope: Scope) -> Result:
    """Own the infrastructure pool and copy its provider IDs, replicas and readiness."""
    mp = scope.mp
    ref = mp.spec.template.spec.infrastructure_ref
    if not ref.name:
        scope.infra_problem = "spec.template.spec.infrastructureRef is not set; set it"
        raise ReferenceProblem(f"{scope.text}: {scope.infra_problem}")
    try:
        infra = InfraMachinePool(await external.get_and_adopt(scope, ref))
    except NotFound as exc:
        scope.infra_pool_not_found = True
        _not_found(scope, ref)
        raise ReferenceProblem(str(exc)) from exc
    except ReferenceProblem as exc:
        scope.infra_problem = str(exc)
        _incorrect_ref(scope, str(exc))
        raise
    scope.infra_pool = infra
    external.copy_failures(scope, infra)
    if infra.deleting:
        return Result()
    ready = infra.provisioned
    mp.status.initialization.infrastructure_provisioned = ready
    mirror_v1beta1(
        mp.status.v1beta1.edit_conditions(),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        infra.raw,
        ready,
        c.V1BETA1_WAITING_FOR_INFRASTRUCTURE_FALLBACK_REASON,
    )
    scope.nodes = await scope.env.watches.workload_nodes(scope.cluster_key)
    if not ready:
        return Result()
    _copy_from_provider(scope, infra)
    return Result()


def _copy_from_provider(scope: Scope, infra: InfraMachinePool) -> None:
    mp = scope.mp
    provider_ids = infra.provider_id_list
    if infra.replicas is not None:
        mp.status.replicas = infra.replicas
    if not provider_ids and mp.status.replicas:
        return  # the provider has instances but has not listed them yet
    scope.provider_ids_observed = True
    if (mp.spec.provider_id_list or []) == provider_ids:
        return
    # Left out when empty, as upstream's omitempty list is.
    mp.spec.provider_id_list = provider_ids or None
    set_v1beta1_counters(mp, ready=0, available=0, unavailable=mp.status.replicas or 0)


def _not_found(scope: Scope, ref: ReferenceView) -> None:
    mp = scope.mp
    text = ref_text(str(ref.kind), scope.namespace, str(ref.name))
    if mp.status.initialization.infrastructure_provisioned:
        v1 = mp.status.v1beta1
        v1.failure_reason = "InvalidConfiguration"
        v1.failure_message = (
            f"MachinePool infrastructure resource {text} has been deleted after being ready"
        )
    message = f"could not find infra reference of kind {ref.kind} with name {ref.name}"
    _incorrect_ref(scope, message)


def _incorrect_ref(scope: Scope, message: str) -> None:
    set_v1beta1_condition(
        scope.mp.status.v1beta1.edit_conditions(),
        c.V1BETA1_INFRASTRUCTURE_READY_CONDITION,
        False,
        c.V1BETA1_INCORRECT_EXTERNAL_REF_REASON,
        message,
        c.SEVERITY_ERROR,
    )
