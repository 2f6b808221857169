"""Joining the workload cluster the way ``kubeadm join`` starts: discover and authenticate.

A real node pins the cluster CA against ``caCertHashes`` and authenticates with its bootstrap
token before TLS bootstrap. The simulator does both for real: it checks the CA from the
cluster's kubeconfig Secret against the pins, then sends a SelfSubjectReview to the workload
kube-apiserver with the token as bearer credentials. A rejected token does not join. The
certificate signing request flow that follows on a real node is skipped: the Node is then
created with the cluster's admin client (``agent.py``). Tokens never reach logs.
"""

from __future__ import annotations

import base64
from typing import Any

from machinepool.runtime import ApiError, Client, Unauthorized, pki
from machinepool.sim.kubelet.joinconfig import JoinInfo

__all__ = ["JoinRejected", "verify_join"]

_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


class JoinRejected(Exception):
    """The workload cluster refused this node's credentials (the message says why)."""


async def verify_join(join: JoinInfo, admin_kubeconfig: dict[str, Any]) -> str:
    """Check the CA pin and authenticate with the token; return the user name it maps to.

    Raises ``JoinRejected`` when the pin does not match or the token is refused.
    """
    cluster = (admin_kubeconfig.get("clusters") or [{}])[0].get("cluster") or {}
    ca_data = str(cluster.get("certificate-authority-data") or "")
    ca_pem = base64.b64decode(ca_data)
    if join.ca_cert_hashes and not join.unsafe_skip_ca_verification:
        pin = pki.ca_public_key_hash(ca_pem)
        if pin not in join.ca_cert_hashes:
            raise JoinRejected("cluster CA does not match discovery.bootstrapToken.caCertHashes")
    server = (
        f"https://{join.api_server_endpoint}" if join.api_server_endpoint else cluster["server"]
    )
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "join", "cluster": {"server": server, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": "join", "user": {"token": join.token}}],
        "contexts": [{"name": "join", "context": {"cluster": "join", "user": "join"}}],
        "current-context": "join",
    }
    client = await Client.from_kubeconfig_dict(kubeconfig, user_agent="machinepool-kubelet")
    try:
        review = await client.request(
            "POST",
            _REVIEW_PATH,
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except Unauthorized as exc:
        raise JoinRejected(f"bootstrap token {join.token_id} was rejected (401)") from exc
    except ApiError as exc:
        raise JoinRejected(
            f"bootstrap token {join.token_id} could not be verified: HTTP {exc.status}"
        ) from exc
    finally:
        await client.close()
    user = ((review.get("status") or {}).get("userInfo") or {}).get("username", "")
    if not str(user).startswith("system:bootstrap:"):
        raise JoinRejected(f"token {join.token_id} is not a bootstrap token (user {user!r})")
    return str(user)
