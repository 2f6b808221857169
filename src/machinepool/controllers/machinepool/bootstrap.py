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
from machinepool.api.meta import dig, ensure
from machinepool.controllers.common import is_deleting, ref_text
from machinepool.controllers.machinepool import external, status
from machinepool.controllers.machinepool.scope import ReferenceProblem, Scope
from machinepool.runtime import ExpectedError, NotFound, Result


def data_secret_created(config: dict[str, object]) -> bool:
    """Whether a bootstrap config reports its data secret as created (either contract)."""
    return bool(
        dig(config, "status", "initialization", "dataSecretCreated")
        or dig(config, "status", "ready") is True
    )


async def reconcile_bootstrap(scope: Scope) -> Result:
    """Own the bootstrap config and take its data secret's name into the template."""
    mp = scope.mp
    bootstrap = ensure(mp, "spec", "template", "spec", "bootstrap")
    ref = bootstrap.get("configRef")
    init = ensure(mp, "status", "initialization")
    if not isinstance(ref, dict) or not ref.get("name"):
        if bootstrap.get("dataSecretName") is not None:
            init["bootstrapDataSecretCreated"] = True
            _v1beta1(scope, True)
            return Result()
        scope.bootstrap_problem = (
            "neither spec.template.spec.bootstrap.configRef nor dataSecretName is set;"
            " set one of them"
        )
        raise ReferenceProblem(f"{scope.text}: {scope.bootstrap_problem}")
    text = ref_text(str(ref.get("kind")), scope.namespace, str(ref.get("name")))
    try:
        config = await external.get_and_adopt(scope, ref)
    except NotFound as exc:
        scope.bootstrap_config_not_found = True
        raise ReferenceProblem(f"could not find {text} for {scope.text}") from exc
    except ReferenceProblem as exc:
        scope.bootstrap_problem = str(exc)
        raise
    scope.bootstrap_config = config
    external.copy_failures(scope, config, str(ref.get("kind")))
    if is_deleting(config):
        return Result()
    created = data_secret_created(config)
    _v1beta1(scope, created, config)
    if not created:
        # The old dataSecretName stays: instances keep joining with it until a new one exists.
        init["bootstrapDataSecretCreated"] = False
        return Result()
    secret = dig(config, "status", "dataSecretName")
    if not secret:
        raise ExpectedError(
            f"{text} reports its data secret created but status.dataSecretName is empty"
        )
    bootstrap["dataSecretName"] = str(secret)
    init["bootstrapDataSecretCreated"] = True
    return Result()


def _v1beta1(scope: Scope, created: bool, config: dict[str, object] | None = None) -> None:
    conditions = status.v1beta1_conditions(scope.mp)
    if config is None:
        set_v1beta1_condition(conditions, c.V1BETA1_BOOTSTRAP_READY_CONDITION, True)
        return
    mirror_v1beta1(
        conditions,
        c.V1BETA1_BOOTSTRAP_READY_CONDITION,
        config,
        created,
        c.V1BETA1_WAITING_FOR_DATA_SECRET_FALLBACK_REASON,
    )
