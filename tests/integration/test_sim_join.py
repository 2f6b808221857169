"""The node simulator's join against a real workload kube-apiserver: the token clients it keeps
for the nodes of one pool still let the apiserver judge the token on every join."""

from __future__ import annotations

import asyncio
import secrets
import string
from typing import Any

from machinepool.controlplane import WorkloadCluster
from machinepool.runtime import SECRETS, Client, pki
from machinepool.simworld.kubelet.join import JoinRejected, TokenClients, verify_join
from machinepool.simworld.kubelet.joinconfig import JoinInfo

_ALPHABET = string.ascii_lowercase + string.digits


async def _bootstrap_token(workload: Client) -> str:
    """A kubeadm-style bootstrap token Secret in kube-system; returns ``<id>.<secret>``."""
    token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    token_secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    await workload.create(
        SECRETS,
        {
            "metadata": {"name": f"bootstrap-token-{token_id}"},
            "type": "bootstrap.kubernetes.io/token",
            "stringData": {
                "token-id": token_id,
                "token-secret": token_secret,
                "usage-bootstrap-authentication": "true",
            },
        },
        "kube-system",
    )
    return f"{token_id}.{token_secret}"


async def _refused_within(
    seconds: float, join: JoinInfo, admin_kubeconfig: dict[str, Any], clients: TokenClients
) -> str:
    """Join until the apiserver refuses; return why (fails the test after ``seconds``)."""
    async with asyncio.timeout(seconds):
        while True:
            try:
                await verify_join(join, admin_kubeconfig, clients)
            except JoinRejected as exc:
                return str(exc)
            await asyncio.sleep(0.5)


async def test_joins_share_a_token_client_and_a_revoked_token_is_still_refused(
    workload: WorkloadCluster,
) -> None:
    pin = pki.ca_public_key_hash(workload.ca_cert_pem)
    admin_kubeconfig = workload.kubeconfig_dict()
    clients = TokenClients(keep=2)
    async with await Client.from_kubeconfig(workload.kubeconfig) as admin:
        first, second, third = [await _bootstrap_token(admin) for _ in range(3)]
        try:
            node = JoinInfo(token=first, ca_cert_hashes=(pin,))
            user = await verify_join(node, admin_kubeconfig, clients)
            assert user == f"system:bootstrap:{node.token_id}"
            # A second node of the same pool joins over the same client.
            assert await verify_join(node, admin_kubeconfig, clients) == user
            assert len(clients) == 1
            # Other tokens get their own; no more than ``keep`` are kept.
            for token in (second, third):
                await verify_join(
                    JoinInfo(token=token, ca_cert_hashes=(pin,)), admin_kubeconfig, clients
                )
            assert len(clients) == 2

            # Revoke the third token, whose client is kept: the next join with it is refused
            # (the apiserver caches a token's success for a few seconds, hence the wait).
            await admin.delete(SECRETS, f"bootstrap-token-{third.partition('.')[0]}", "kube-system")
            revoked = JoinInfo(token=third, ca_cert_hashes=(pin,))
            refusal = await _refused_within(60, revoked, admin_kubeconfig, clients)
            assert "was rejected (401)" in refusal
            # The other kept token still joins.
            second_user = await verify_join(
                JoinInfo(token=second, ca_cert_hashes=(pin,)), admin_kubeconfig, clients
            )
            assert second_user == f"system:bootstrap:{second.partition('.')[0]}"
        finally:
            await clients.close()
    assert len(clients) == 0
