"""The kubeadm bootstrap controller against a real management cluster and a real workload
kube-apiserver with bootstrap-token authentication."""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml
from tests.support import eventually, wait_for
from tests.support.builders import kubeadm_config
from tests.support.conditions import condition
from tests.support.resources import KUBEADM_CONFIGS, MACHINE_POOLS

from machinepool.api.meta import ADOPTION_GRACE_SECONDS, parse_time
from machinepool.bootstrap.kubeadm import (
    DATA_TOKEN_ID_ANNOTATION,
    TOKEN_CONFIG_UID_LABEL,
)
from machinepool.runtime import (
    EVENTS,
    SECRETS,
    CacheScope,
    Invalid,
    Manager,
    Obj,
    ObjectKey,
    Resource,
)
from machinepool.runtime.services.pki import ca_public_key_hash

from .conftest import Env, b64, data_created, rejected_eventually, unb64, whoami

JINJA_NAME = '{{ ds.meta_data["local_hostname"] }}'
JSON_BODY = json.dumps({"registry": {"mirrors": ["a", "b"]}, "note": "# not: yaml"}, indent=2)
SCRIPT = "#!/bin/sh\nset -eu\n  echo 'indented'   \necho done"

RunController = Callable[..., Awaitable[Manager]]


async def read_data(env: Env, name: str) -> tuple[Obj, dict[str, Any], dict[str, Any]]:
    """(data Secret, parsed cloud-config, parsed JoinConfiguration)."""
    secret = await env.client.get(SECRETS, name, env.namespace)
    text = unb64(secret["data"]["value"])
    assert text.startswith("## template: jinja\n#cloud-config\n")
    cloud = yaml.safe_load(text)
    join_file = next(
        f for f in cloud["write_files"] if f["path"] == "/run/kubeadm/kubeadm-join-config.yaml"
    )
    return secret, cloud, yaml.safe_load(join_file["content"])


def join_token(join: dict[str, Any]) -> str:
    return str(join["discovery"]["bootstrapToken"]["token"])


async def test_pool_config_joins_with_a_working_token_and_cleans_up(
    bootstrap_env: Env, run_controller: RunController, captured: io.StringIO
) -> None:
    env = bootstrap_env
    await env.client.create(
        SECRETS,
        {"metadata": {"name": "extra"}, "data": {"ca.pem": b64("-----BEGIN X-----\nabc\n")}},
        env.namespace,
    )
    pool = await env.create_pool("workers", "workers")
    await env.create_config(
        "workers",
        {
            "files": [
                {
                    "path": "/etc/app.json",
                    "owner": "root:root",
                    "permissions": "0600",
                    "content": JSON_BODY,
                },
                {"path": "/usr/local/bin/setup.sh", "permissions": "0755", "content": SCRIPT},
                {
                    "path": "/etc/extra/ca.pem",
                    "contentFrom": {"secret": {"name": "extra", "key": "ca.pem"}},
                },
            ],
            "preKubeadmCommands": ["/usr/local/bin/setup.sh"],
            "postKubeadmCommands": ["echo joined {{ ds.meta_data.instance_id }}"],
            "users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA ops"]}],
            "joinConfiguration": {
                "nodeRegistration": {
                    "name": JINJA_NAME,
                    "kubeletExtraArgs": [{"name": "node-labels", "value": "pool=workers"}],
                }
            },
        },
        pool=pool,
    )
    await run_controller(900)
    config = await env.wait_config("workers", data_created)
    assert config is not None
    status = config["status"]
    assert status["dataSecretName"] == "workers"
    assert status["ready"] is True
    for type_ in ("Ready", "DataSecretAvailable", "CertificatesAvailable"):
        assert condition(config, type_)["status"] == "True", type_
    # As upstream's: no finalizer, so deleting the config is never held (its cleanup follows).
    assert not config["metadata"].get("finalizers")

    secret, cloud, join = await read_data(env, "workers")
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert unb64(secret["data"]["format"]) == "cloud-config"
    assert secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == env.cluster
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "KubeadmConfig",
        config["metadata"]["uid"],
        True,
    )
    files = {f["path"]: f for f in cloud["write_files"]}
    assert files["/etc/app.json"]["content"] == JSON_BODY
    assert files["/etc/app.json"]["permissions"] == "0600"
    assert files["/usr/local/bin/setup.sh"]["content"] == SCRIPT
    assert files["/etc/extra/ca.pem"]["content"] == "-----BEGIN X-----\nabc\n"
    assert cloud["runcmd"][0] == "/usr/local/bin/setup.sh"
    assert cloud["runcmd"][-1] == "echo joined {{ ds.meta_data.instance_id }}"
    assert cloud["users"] == [{"name": "ops", "ssh_authorized_keys": ["ssh-ed25519 AAAA ops"]}]
    assert join["kind"] == "JoinConfiguration"
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert join["nodeRegistration"]["name"] == JINJA_NAME
    discovery = join["discovery"]["bootstrapToken"]
    assert discovery["apiServerEndpoint"] == env.workload.url.removeprefix("https://")
    assert discovery["caCertHashes"] == [ca_public_key_hash(env.workload.ca_cert_pem)]

    token = join_token(join)
    token_id = token.split(".")[0]
    assert secret["metadata"]["annotations"][DATA_TOKEN_ID_ANNOTATION] == token_id
    assert await whoami(env.workload, token) == (201, f"system:bootstrap:{token_id}")
    assert (await whoami(env.workload, "zzzzzz.0123456789abcdef"))[0] == 401
    stored = await env.workload_client.get(SECRETS, f"bootstrap-token-{token_id}", "kube-system")
    assert stored["type"] == "bootstrap.kubernetes.io/token"
    assert unb64(stored["data"]["auth-extra-groups"]) == (
        "system:bootstrappers:kubeadm:default-node-token"
    )
    assert stored["metadata"]["labels"][TOKEN_CONFIG_UID_LABEL] == config["metadata"]["uid"]

    # No token value, and no kubeconfig credential, in logs or Events. The first token is the
    # config's ordinary making: logged, not an Event (a rotation is one: the test below).
    assert f"bootstrap-token-{token_id}" in captured.getvalue()
    events = await env.client.list(EVENTS, env.namespace)
    assert not [e for e in events.items if e.get("reason") == "BootstrapTokenCreated"]
    kubeconfig = env.workload.kubeconfig_dict()
    client_key = kubeconfig["users"][0]["user"]["client-key-data"]
    secret_half = token.split(".")[1]
    for haystack in (captured.getvalue(), json.dumps(events.items)):
        assert secret_half not in haystack
        assert client_key not in haystack

    await env.client.delete(KUBEADM_CONFIGS, "workers", env.namespace)
    await env.wait_config("workers", lambda obj: obj is None)
    assert (
        await wait_for(env.client, SECRETS, env.namespace, "workers", lambda o: o is None) is None
    )
    await tokens_gone(env, config)
    assert await rejected_eventually(env.workload, token) == 401


async def config_tokens(env: Env, config: Obj) -> list[Obj]:
    """The workload cluster's bootstrap-token Secrets made for ``config``."""
    listed = await env.workload_client.list(
        SECRETS,
        "kube-system",
        label_selector=f"{TOKEN_CONFIG_UID_LABEL}={config['metadata']['uid']}",
    )
    return listed.items


async def made_with_tokens(env: Env, name: str) -> tuple[Obj, list[Obj]]:
    """Config ``name`` once its data Secret is made, and its tokens (at least one)."""
    config = await env.wait_config(name, data_created)
    assert config is not None
    tokens = await config_tokens(env, config)
    assert tokens
    return config, tokens


async def tokens_gone(env: Env, config: Obj) -> None:
    async def none_left() -> bool:
        return not await config_tokens(env, config)

    await eventually(none_left, f"{config['metadata']['name']}'s tokens deleted")


async def test_an_earlier_versions_finalizer_is_released(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    """Configs made by an earlier version carry its finalizer. One deleted before this
    version ran is cleaned as it was (tokens and data Secret) and let go, not left stuck; a
    live one loses the finalizer, which upstream's provider would never release."""
    env = bootstrap_env
    configs: dict[str, Obj] = {}
    for name in ("deleted", "live"):
        pool = await env.create_pool(name, name)
        await env.create_config(name, {}, pool=pool)
    mgr = await run_controller(900)
    for name in ("deleted", "live"):
        configs[name], _ = await made_with_tokens(env, name)
    await mgr.stop()
    held = {"metadata": {"finalizers": ["kubeadmconfig.bootstrap.cluster.x-k8s.io"]}}
    for name in ("deleted", "live"):
        await env.client.patch(KUBEADM_CONFIGS, name, held, env.namespace)
    await env.client.delete(KUBEADM_CONFIGS, "deleted", env.namespace)

    await run_controller(900)
    assert await env.wait_config("deleted", lambda obj: obj is None) is None
    assert (
        await wait_for(env.client, SECRETS, env.namespace, "deleted", lambda o: o is None) is None
    )
    await tokens_gone(env, configs["deleted"])
    released = await env.wait_config(
        "live", lambda obj: obj is not None and not obj["metadata"].get("finalizers")
    )
    assert released is not None
    assert await config_tokens(env, configs["live"])


async def test_a_config_that_leaves_the_managers_view_keeps_its_tokens(
    bootstrap_env: Env, run_controller: RunController, captured: io.StringIO
) -> None:
    """A manager that watches only labelled configs (``--watch-filter``, a shard) sees a
    config whose label changed as deleted; it still exists, and its pool still joins with its
    token, so nothing of it is deleted."""
    env = bootstrap_env
    mine = "cluster.x-k8s.io/watch-filter=mine"
    pool = await env.create_pool("moving", "moving")
    await env.create_config("moving", {}, pool=pool)
    labelled = {"metadata": {"labels": {"cluster.x-k8s.io/watch-filter": "mine"}}}
    await env.client.patch(KUBEADM_CONFIGS, "moving", labelled, env.namespace)
    await run_controller(900, CacheScope(label_selector=mine, filters=_configs_only))
    config, tokens = await made_with_tokens(env, "moving")

    elsewhere = {"metadata": {"labels": {"cluster.x-k8s.io/watch-filter": "theirs"}}}
    await env.client.patch(KUBEADM_CONFIGS, "moving", elsewhere, env.namespace)
    await eventually(
        lambda: "left this manager's view" in captured.getvalue(), "the moved config's reconcile"
    )
    assert await config_tokens(env, config) == tokens
    assert await env.client.get(SECRETS, "moving", env.namespace)


async def test_a_config_clusterctl_move_deletes_keeps_its_tokens(
    bootstrap_env: Env, run_controller: RunController, captured: io.StringIO
) -> None:
    """``clusterctl move`` deletes the source's copy of a config that lives on in the target
    management cluster: the pool's instances still join with its token."""
    env = bootstrap_env
    pool = await env.create_pool("moved", "moved")
    await env.create_config("moved", {}, pool=pool)
    await run_controller(900)
    config, tokens = await made_with_tokens(env, "moved")

    moving = {"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}}}
    await env.client.patch(KUBEADM_CONFIGS, "moved", moving, env.namespace)
    await env.client.delete(KUBEADM_CONFIGS, "moved", env.namespace)
    await eventually(
        lambda: "moved by clusterctl move" in captured.getvalue(), "the moved config's cleanup"
    )
    assert await config_tokens(env, config) == tokens


def _configs_only(resource: Resource) -> bool:
    return resource.kind == "KubeadmConfig"


async def test_pool_token_is_refreshed_then_rotated_and_the_old_one_expires(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    env = bootstrap_env
    ttl = 20
    pool = await env.create_pool("rot", "rot")
    await env.create_config("rot", {}, pool=pool)
    await run_controller(ttl)
    await env.wait_config("rot", data_created)
    secret, _, join = await read_data(env, "rot")
    first = join_token(join)
    first_id = first.split(".")[0]
    token_name = f"bootstrap-token-{first_id}"
    created = await env.workload_client.get(SECRETS, token_name, "kube-system")
    expiration = created["data"]["expiration"]

    # No Node has joined yet: the token is extended, not replaced.
    await wait_for(
        env.workload_client,
        SECRETS,
        "kube-system",
        token_name,
        lambda o: o is not None and o["data"]["expiration"] != expiration,
    )
    _, _, join = await read_data(env, "rot")
    assert join_token(join) == first

    # A Node joined: from now on the token rotates at half its TTL.
    await env.client.patch(
        MACHINE_POOLS,
        "rot",
        {"status": {"nodeRefs": [{"name": "node-1"}], "replicas": 1}},
        env.namespace,
        subresource="status",
    )

    def rotated(obj: Obj | None) -> bool:
        annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        return annotations.get(DATA_TOKEN_ID_ANNOTATION) not in (None, first_id)

    rewritten = await wait_for(env.client, SECRETS, env.namespace, "rot", rotated, within=3 * ttl)
    assert rewritten is not None
    assert rewritten["metadata"]["uid"] == secret["metadata"]["uid"]  # rewritten in place
    _, _, join = await read_data(env, "rot")
    second = join_token(join)
    assert second != first
    second_id = second.split(".")[0]
    assert await whoami(env.workload, second) == (201, f"system:bootstrap:{second_id}")
    events = await env.client.list(EVENTS, env.namespace)
    notes = [e.get("note", "") for e in events.items if e.get("reason") == "BootstrapTokenRotated"]
    assert [n for n in notes if f"bootstrap-token-{second_id}" in n], "the rotation is an Event"
    assert not [n for n in notes if second.split(".")[1] in n], "and holds no token value"

    # The old token lives out its lifetime, then is gone and no longer authenticates.
    await wait_for(
        env.workload_client, SECRETS, "kube-system", token_name, lambda o: o is None, within=3 * ttl
    )
    assert await rejected_eventually(env.workload, first) == 401
    assert (await whoami(env.workload, second))[0] == 201


async def test_a_config_its_pool_has_not_adopted_yet_gets_no_status_until_adopted(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    """A config a MachinePool names but has not adopted (no owner, no cluster-name label, as
    when both are created together) gets no write at all: the adoption brings it back, and a
    status before it would be one more write per new pool; a restart leaves it so. A config
    that no pool names reports WaitingForCluster, which says why it waits (after
    the adoption grace: its pool is usually applied a moment after it), unless it is paused:
    it asked to be left alone, and reports Paused once it has a Cluster."""
    env = bootstrap_env
    pool = await env.create_pool("named", "named")
    for name in ("named", "orphan", "paused"):
        body = kubeadm_config(env.namespace, name, labels={}, spec={})
        if name == "paused":
            body["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": "true"}
        await env.client.create(KUBEADM_CONFIGS, body, env.namespace)
    mgr = await run_controller(900)
    orphan = await env.wait_config(
        "orphan",
        lambda obj: condition(obj, "DataSecretAvailable").get("reason") == "WaitingForCluster",
    )
    assert "no owner" in condition(orphan, "DataSecretAvailable")["message"]
    # Not at once: its pool usually follows it. Timestamps have whole seconds.
    said = parse_time(condition(orphan, "DataSecretAvailable")["lastTransitionTime"])
    waited = said - parse_time(orphan["metadata"]["creationTimestamp"])
    assert waited.total_seconds() >= ADOPTION_GRACE_SECONDS - 1, waited

    # Made before the controller started, a config is queued by its first pass before the
    # workers start; once they run, a key neither queued nor being reconciled has been.
    ctrl = next(c for c in mgr.controllers if c.name == "kubeadmconfig")

    def handled(name: str) -> Callable[[], bool]:
        key = ObjectKey(env.namespace, name)

        def done() -> bool:
            return ctrl.running and not (ctrl.queue.is_queued(key) or ctrl.queue.is_processing(key))

        return done

    for name in ("named", "paused"):
        await eventually(handled(name), f"{name}'s first reconcile")
        quiet = await env.client.get(KUBEADM_CONFIGS, name, env.namespace)
        assert not (quiet.get("status") or {}).get("conditions"), (name, quiet.get("status"))
        assert not quiet["metadata"].get("finalizers"), name

    # A restart's first pass reconciles every config again: the named one stays quiet.
    await mgr.stop()
    mgr = await run_controller(900)
    ctrl = next(c for c in mgr.controllers if c.name == "kubeadmconfig")

    def first_pass_done() -> bool:
        reconciles = sum(
            mgr.metrics.registry.get_sample_value(
                "controller_runtime_reconcile_total",
                {"controller": "kubeadmconfig", "result": result},
            )
            or 0
            for result in ("success", "requeue_after", "error")
        )
        return reconciles >= 3 and handled("named")()

    await eventually(first_pass_done, "the restarted controller's first pass")
    named = await env.client.get(KUBEADM_CONFIGS, "named", env.namespace)
    assert not (named.get("status") or {}).get("conditions"), named.get("status")

    # Labelled with its Cluster, the paused config says it is paused, and nothing else.
    label = {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": env.cluster}}}
    await env.client.patch(KUBEADM_CONFIGS, "paused", label, env.namespace)
    paused = await env.wait_config(
        "paused", lambda obj: condition(obj, "Paused").get("status") == "True"
    )
    assert not condition(paused, "DataSecretAvailable"), paused["status"]

    # The pool adopts it, as the core does: owner and label in one patch.
    adoption = {
        "metadata": {
            "labels": {"cluster.x-k8s.io/cluster-name": env.cluster},
            "ownerReferences": [
                {
                    "apiVersion": MACHINE_POOLS.api_version,
                    "kind": MACHINE_POOLS.kind,
                    "name": "named",
                    "uid": pool["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    }
    await env.client.patch(KUBEADM_CONFIGS, "named", adoption, env.namespace)
    await env.wait_config("named", data_created)


async def test_bad_input_is_reported_in_conditions_not_crashes(
    bootstrap_env: Env, run_controller: RunController
) -> None:
    env = bootstrap_env
    with pytest.raises(Invalid, match=r"spec\.format"):
        await env.create_config("bad-format", {"format": "yaml"})
    await env.create_config(
        "bad-mode", {"files": [{"path": "/etc/x", "permissions": "rw-r--r--", "content": "x"}]}
    )
    await env.create_config(
        "missing-source",
        {"files": [{"path": "/etc/y", "contentFrom": {"secret": {"name": "nope", "key": "k"}}}]},
    )
    await env.create_cluster("no-kubeconfig")
    await env.create_config("no-kubeconfig", {}, cluster="no-kubeconfig")
    await env.create_cluster("not-initialized", control_plane=False)
    await env.create_config("not-initialized", {}, cluster="not-initialized")
    await env.create_cluster("no-infra", infrastructure=False)
    await env.create_config("no-infra", {}, cluster="no-infra")
    await env.create_config("ok", {})
    await run_controller(900)

    def reason(type_: str, want: str) -> Callable[[Obj | None], bool]:
        return lambda obj: condition(obj, type_).get("reason") == want

    bad_mode = await env.wait_config(
        "bad-mode", reason("DataSecretAvailable", "DataSecretGenerationFailed")
    )
    message = condition(bad_mode, "DataSecretAvailable")["message"]
    assert "spec.files[0]" in message
    assert '"0644"' in message
    assert condition(bad_mode, "Ready")["status"] == "False"
    missing = await env.wait_config(
        "missing-source", reason("DataSecretAvailable", "DataSecretGenerationFailed")
    )
    assert "secret" in condition(missing, "DataSecretAvailable")["message"]
    assert "nope" in condition(missing, "DataSecretAvailable")["message"]
    no_kubeconfig = await env.wait_config(
        "no-kubeconfig", reason("CertificatesAvailable", "WaitingForKubeconfigSecret")
    )
    assert (
        "no-kubeconfig-kubeconfig" in condition(no_kubeconfig, "CertificatesAvailable")["message"]
    )
    await env.wait_config(
        "not-initialized", reason("DataSecretAvailable", "WaitingForControlPlaneAvailable")
    )
    await env.wait_config(
        "no-infra", reason("DataSecretAvailable", "WaitingForClusterInfrastructure")
    )
    # The controller survived all of that and still serves a good config.
    await env.wait_config("ok", data_created)
    # No token was made for a config that can never render.
    for name in ("bad-mode",):
        obj = await env.client.get(KUBEADM_CONFIGS, name, env.namespace)
        tokens = await env.workload_client.list(
            SECRETS,
            "kube-system",
            label_selector=f"{TOKEN_CONFIG_UID_LABEL}={obj['metadata']['uid']}",
        )
        assert tokens.items == []
    # Fixing the input recovers.
    await env.client.create(
        SECRETS, {"metadata": {"name": "nope"}, "data": {"k": b64("fixed\n")}}, env.namespace
    )
    await env.wait_config("missing-source", data_created)
