"""The bootstrap phase: adopt the bootstrap config and propagate its data secret name.

Called by ``controller`` on every normal reconcile. With a configRef the config is adopted,
its readiness read (``status.initialization.dataSecretCreated``; v1beta1 contract
``status.ready``) and, once created, ``status.dataSecretName`` is copied into
``spec.template.spec.bootstrap.dataSecretName``. Without a configRef a dataSecretName means
the user brought their own data.
"""

from __future__ import annotations

from machinepool.api import constants as c
from machinepool.api.conditions import mirror_v1beta1, set_v1beta1_condition
from machinepool.api.contract import BootstrapConfig
from machinepool.controllers.common import ref_text
from machinepool.controllers.machinepool import external
from machinepool.controllers.machinepool.scope import ReferenceProblem, Scope
from machinepool.runtime import ExpectedError, NotFound, Result


async def reconcile_bootstrap(scope: Scope) -> Result:
    """Own the bootstrap config and take its data secret's name into the template."""
    mp = scope.mp
    bootstrap = mp.spec.template.spec.bootstrap
    ref = bootstrap.config_ref
    init = mp.status.initialization
    if not ref.name:
        if bootstrap.data_secret_name is not None:
            init.bootstrap_data_secret_created = True
            _v1beta1(scope, True)
            return Result()
        scope.bootstrap_problem = (
            "neither spec.template.spec.bootstrap.configRef nor dataSecretName is set;"
            " set one of them"
        )
        raise ReferenceProblem(f"{scope.text}: {scope.bootstrap_problem}")
    text = ref_text(str(ref.kind), scope.namespace, ref.name)
    try:
        config = BootstrapConfig(await external.get_and_adopt(scope, ref))
    except NotFound as exc:
        scope.bootstrap_config_not_found = True
        raise ReferenceProblem(f"could not find {text} for {scope.text}") from exc
    except ReferenceProblem as exc:
        scope.bootstrap_problem = str(exc)
        raise
    scope.bootstrap_config = config
    external.copy_failures(scope, config)
    if config.deleting:
        return Result()
    created = config.data_secret_created
    _v1beta1(scope, created, config)
    if not created:
        # The old dataSecretName stays: instances keep joining with it until a new one exists.
        init.bootstrap_data_secret_created = False
        return Result()
    secret = config.data_secret_name
    if not secret:
        raise ExpectedError(
            f"{text} reports its data secret created but status.dataSecretName is empty"
        )
    bootstrap.data_secret_name = secret
    init.bootstrap_data_secret_created = True
    return Result()


def _v1beta1(scope: Scope, created: bool, config: BootstrapConfig | None = None) -> None:
    conditions = scope.mp.status.v1beta1.edit_conditions()
    if config is None:
        set_v1beta1_condition(conditions, c.V1BETA1_BOOTSTRAP_READY_CONDITION, True)
        return
    mirror_v1beta1(
        conditions,
        c.V1BETA1_BOOTSTRAP_READY_CONDITION,
        config.raw,
        created,
        c.V1BETA1_WAITING_FOR_DATA_SECRET_FALLBACK_REASON,
    )
