"""The data phase: resolve the config's inputs, render the cloud-config, store the data Secret.

The data Secret is named after the KubeadmConfig, lives in its namespace, has type
``cluster.x-k8s.io/secret`` and keys ``value`` (the cloud-config) and ``format``, carries the
cluster-name label and is controller-owned by the config. It is written only when its content
differs, and always in place (same name), so providers that read
``status.dataSecretName`` keep reading the same Secret.

Providers must treat a change of this Secret as *user data only*: a token rotation rewrites
it every ttl/2, and that must never roll running instances; new instances just read it.
"""

from __future__ import annotations

import base64
from typing import Any

from machinepool.api import constants as c
from machinepool.api.bootstrap_v1beta2 import (
    BootstrapTokenDiscovery,
    Discovery,
    File,
    JoinConfiguration,
    KubeadmConfigSpec,
    User,
)
from machinepool.api.views import MachinePoolView
from machinepool.bootstrap.kubeadm import resources as r
from machinepool.bootstrap.kubeadm.certs import endpoint_from_server
from machinepool.bootstrap.kubeadm.cloudinit import (
    InvalidBootstrapInput,
    NodeInput,
    kubeadm_api_version,
    render_node_cloud_config,
    validate_files,
)
from machinepool.bootstrap.kubeadm.ignition import ignition_spec_problem, render_node_ignition
from machinepool.bootstrap.kubeadm.prerequisites import POLL_SECONDS
from machinepool.bootstrap.kubeadm.scope import Scope
from machinepool.runtime import (
    SECRETS,
    ExpectedError,
    NotFound,
    Obj,
    Result,
    controller_owner,
)
from machinepool.runtime.services.pki import ca_public_key_hash


class MissingSecret(InvalidBootstrapInput):
    """A referenced Secret or key does not exist (yet): worth polling for."""


async def _secret_value(scope: Scope, name: str, key: str, field: str) -> bytes:
    namespace = scope.key.namespace
    try:
        secret = await scope.client.get(SECRETS, name, namespace)
    except NotFound as exc:
        raise MissingSecret(
            f"{field}: secret {namespace}/{name} not found; create it or fix the name"
        ) from exc
    encoded = (secret.get("data") or {}).get(key)
    if encoded is None:
        raise MissingSecret(
            f"{field}: secret {namespace}/{name} has no key {key!r}; add it or fix the key"
        )
    return base64.b64decode(encoded)


async def _resolve_files(scope: Scope, files: list[File]) -> list[File]:
    resolved = []
    for i, item in enumerate(files):
        if item.content_from is None:
            resolved.append(item)
            continue
        ref = item.content_from.secret
        raw = await _secret_value(scope, ref.name, ref.key, f"spec.files[{i}].contentFrom")
        update: dict[str, Any] = {"content_from": None}
        try:
            update["content"] = raw.decode()
        except UnicodeDecodeError:
            if item.encoding is not None:
                raise InvalidBootstrapInput(
                    f"spec.files[{i}].contentFrom: secret {ref.name} key {ref.key} is not text,"
                    f" but encoding {item.encoding} says it is; store the encoded text"
                ) from None
            # Binary content: ship it base64 so the bytes arrive unchanged.
            update["content"] = base64.b64encode(raw).decode()
            update["encoding"] = "base64"
        resolved.append(item.model_copy(update=update))
    return resolved


async def _resolve_users(scope: Scope, users: list[User]) -> list[User]:
    resolved = []
    for i, user in enumerate(users):
        ref = (user.passwd_from or {}).get("secret") or {}
        if not ref:
            resolved.append(user)
            continue
        field = f"spec.users[{i}].passwdFrom"
        raw = await _secret_value(scope, str(ref.get("name")), str(ref.get("key")), field)
        resolved.append(user.model_copy(update={"passwd_from": None, "passwd": raw.decode()}))
    return resolved


def _endpoint(scope: Scope, join: JoinConfiguration) -> str:
    """The user's endpoint, else the Cluster's controlPlaneEndpoint, else the kubeconfig's."""
    bootstrap = join.discovery.bootstrap_token if join.discovery else None
    if bootstrap and bootstrap.api_server_endpoint:
        return bootstrap.api_server_endpoint
    endpoint = scope.cluster.spec.control_plane_endpoint if scope.cluster else None
    if endpoint is not None and endpoint.host and endpoint.port:
        host, port = str(endpoint.host), endpoint.port
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return endpoint_from_server(scope.ca.server) if scope.ca else ""


def _join_configuration(scope: Scope, spec: KubeadmConfigSpec, endpoint: str) -> JoinConfiguration:
    """The user's JoinConfiguration with bootstrap-token discovery filled in (a copy)."""
    join = spec.join_configuration or JoinConfiguration()
    discovery = join.discovery or Discovery()
    if discovery.file or scope.token is None:
        return join
    bootstrap = discovery.bootstrap_token or BootstrapTokenDiscovery()
    hashes = bootstrap.ca_cert_hashes or (
        [ca_public_key_hash(scope.ca.ca_pem)] if scope.ca else None
    )
    bootstrap = bootstrap.model_copy(
        update={
            "token": str(scope.token),
            "api_server_endpoint": endpoint,
            "ca_cert_hashes": hashes,
            "unsafe_skip_ca_verification": bootstrap.unsafe_skip_ca_verification
            or (None if hashes else True),
        }
    )
    discovery = discovery.model_copy(update={"bootstrap_token": bootstrap})
    return join.model_copy(update={"discovery": discovery})


class RenderFailed(ExpectedError):
    """The config cannot be rendered as it stands; DataSecretAvailable says why and names the
    field. Retried with backoff like any error, and at once when an input changes: the
    config's spec and its pool's version both wake the reconcile."""


def _refused(scope: Scope, message: str) -> RenderFailed:
    """DataSecretAvailable=False saying ``message``; the error to raise."""
    scope.mark(r.DATA_SECRET_AVAILABLE, False, r.GENERATION_FAILED, message, c.SEVERITY_WARNING)
    return RenderFailed(message)


def _spec_problem(spec: KubeadmConfigSpec, version: str) -> str:
    """What makes ``spec`` unrenderable for a node of Kubernetes ``version``, or ""."""
    try:
        kubeadm_api_version(version)
    except InvalidBootstrapInput as exc:
        return f"{exc} (the version of the config's owner)"
    fmt = spec.format or r.FORMAT_CLOUD_CONFIG
    if fmt not in (r.FORMAT_CLOUD_CONFIG, r.FORMAT_IGNITION):
        return f"spec.format {fmt!r} is not supported by this provider; use cloud-config"
    ignition_problem = ignition_spec_problem(spec)
    if ignition_problem:
        return ignition_problem
    join = spec.join_configuration or JoinConfiguration()
    if join.control_plane is not None:
        return (
            "spec.joinConfiguration.controlPlane is set, but this provider joins workers only;"
            " remove it"
        )
    try:
        validate_files(spec.files or [])
    except InvalidBootstrapInput as exc:
        return str(exc)
    return ""


async def validate_spec(scope: Scope) -> Result:
    """Reject what can never render before any token is made for it."""
    problem = _spec_problem(scope.model.spec or KubeadmConfigSpec(), _owner_version(scope))
    if problem:
        raise _refused(scope, problem)
    return Result()


async def render(scope: Scope) -> str | None:
    """The cloud-config for this config, or ``None`` (with a condition) when it cannot be
    rendered yet."""
    spec = scope.model.spec or KubeadmConfigSpec()
    join = spec.join_configuration or JoinConfiguration()
    files = await _resolve_files(scope, list(spec.files or []))
    users = await _resolve_users(scope, list(spec.users or []))
    endpoint = _endpoint(scope, join)
    if not endpoint and scope.token is not None:
        scope.wait(
            r.WAITING_FOR_ENDPOINT,
            f"Cluster {scope.cluster_key} has no spec.controlPlaneEndpoint and its kubeconfig"
            " names no server",
        )
        return None
    node = NodeInput(
        join_configuration=_join_configuration(scope, spec, endpoint),
        files=files,
        users=users,
        boot_commands=spec.boot_commands or (),
        pre_kubeadm_commands=spec.pre_kubeadm_commands or (),
        post_kubeadm_commands=spec.post_kubeadm_commands or (),
        ntp=spec.ntp,
        mounts=spec.mounts or (),
        disk_setup=spec.disk_setup,
        verbosity=spec.verbosity,
        kubernetes_version=_owner_version(scope),
    )
    if spec.format == r.FORMAT_IGNITION:
        return render_node_ignition(node, _additional_config(spec))
    return render_node_cloud_config(node)


def _additional_config(spec: KubeadmConfigSpec) -> str:
    """``spec.ignition.containerLinuxConfig.additionalConfig`` (free-form in our API), or ""."""
    clc = (spec.ignition or {}).get("containerLinuxConfig") or {}
    return str(clc.get("additionalConfig") or "")


def _owner_version(scope: Scope) -> str:
    """The Kubernetes version the owner runs (a MachinePool's template, a Machine's spec)."""
    owner = scope.owner
    if isinstance(owner, MachinePoolView):
        return str(owner.spec.template.spec.version or "")
    return str(owner.spec.version or "") if owner is not None else ""


async def write_data(scope: Scope) -> Result:
    """Render and store the data Secret; report it in status."""
    try:
        text = await render(scope)
    except MissingSecret as exc:
        # No watch tells when the Secret comes: poll for it, however long it takes.
        scope.mark(
            r.DATA_SECRET_AVAILABLE, False, r.GENERATION_FAILED, str(exc), c.SEVERITY_WARNING
        )
        scope.halt = True
        return Result(requeue_after=POLL_SECONDS)
    except InvalidBootstrapInput as exc:
        raise _refused(scope, str(exc)) from exc
    if text is None:
        return Result()
    await _store(scope, text)
    scope.status.data_secret_name = scope.key.name
    scope.status.initialization.data_secret_created = True
    scope.status.ready = True
    scope.mark(r.DATA_SECRET_AVAILABLE, True, r.AVAILABLE)
    return Result()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _desired_metadata(scope: Scope) -> Obj:
    meta = scope.config.metadata
    owner = {
        "apiVersion": r.KUBEADM_CONFIG_API_VERSION,
        "kind": "KubeadmConfig",
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    token = scope.token
    managed = token is not None and not scope.user_token
    annotations = {r.DATA_TOKEN_ID_ANNOTATION: token.id} if token and managed else {}
    return {
        "labels": {c.CLUSTER_NAME_LABEL: scope.cluster_name},
        "annotations": annotations,
        "ownerReferences": [owner],
    }


async def _store(scope: Scope, text: str) -> None:
    """Create or update the data Secret; ``RenderFailed`` (with a condition) when another
    object controls a Secret of that name."""
    fmt = (scope.model.spec or KubeadmConfigSpec()).format or r.FORMAT_CLOUD_CONFIG
    data = {"value": _b64(text), "format": _b64(fmt)}
    desired = _desired_metadata(scope)
    existing = scope.data_secret
    if existing is None:
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": scope.key.name, "namespace": scope.key.namespace, **desired},
            "type": r.CLUSTER_SECRET_TYPE,
            "data": data,
        }
        if not body["metadata"]["annotations"]:
            del body["metadata"]["annotations"]
        await scope.client.create(SECRETS, body, scope.key.namespace)
        scope.log.info("created bootstrap data secret", secret=scope.key.name)
        return
    owner = controller_owner(existing)
    if (owner and owner.get("uid") != scope.uid) or existing.get("type") != r.CLUSTER_SECRET_TYPE:
        raise _refused(
            scope,
            f"secret {scope.key} exists but is not a {r.CLUSTER_SECRET_TYPE} secret of this"
            " KubeadmConfig; delete or rename it",
        )
    patch = _patch(existing, desired, data)
    if patch:
        meta = existing["metadata"]
        patch.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]
        await scope.client.patch(SECRETS, scope.key.name, patch, scope.key.namespace)
        scope.log.info("updated bootstrap data secret", secret=scope.key.name)


def _patch(existing: Obj, desired: Obj, data: dict[str, str]) -> Obj:
    """The merge patch bringing ``existing`` to the desired labels, annotation, owner, data."""
    meta = existing.get("metadata") or {}
    patch_meta: Obj = {}
    labels = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in desired["labels"].items()):
        patch_meta["labels"] = desired["labels"]
    annotations = meta.get("annotations") or {}
    wanted = desired["annotations"]
    token_id = annotations.get(r.DATA_TOKEN_ID_ANNOTATION)
    if token_id != wanted.get(r.DATA_TOKEN_ID_ANNOTATION):
        patch_meta["annotations"] = {
            r.DATA_TOKEN_ID_ANNOTATION: wanted.get(r.DATA_TOKEN_ID_ANNOTATION)
        }
    if controller_owner(existing) is None:
        patch_meta["ownerReferences"] = [
            *(meta.get("ownerReferences") or []),
            *desired["ownerReferences"],
        ]
    patch: Obj = {"metadata": patch_meta} if patch_meta else {}
    current = existing.get("data") or {}
    changed = {k: v for k, v in data.items() if current.get(k) != v}
    if changed:
        patch["data"] = changed
    return patch
