"""Joining the workload cluster the way ``kubeadm join`` and kubelet do: discover,
authenticate, and (optionally) trade the bootstrap token for a client certificate.

A real node pins the cluster CA against ``caCertHashes`` and authenticates with its bootstrap
token before TLS bootstrap. The simulator does both for real (``verify_join``): it checks the
CA from the cluster's kubeconfig Secret against the pins, then sends a SelfSubjectReview to
the workload kube-apiserver with the token as bearer credentials. A rejected token does not
join.

TLS bootstrap follows when the node simulator runs with
``KubeletOptions.kubelet_tls_bootstrap`` (``request_client_certificate``): with the token it
creates a CertificateSigningRequest for ``system:node:<name>`` in group ``system:nodes``
(signer ``kubernetes.io/kube-apiserver-client-kubelet``), waits for kube-controller-manager to
approve and sign it, and returns the certificate with the key it made; the node's client is
built from those (``agent.py``), and the workload cluster's Node authorizer and
NodeRestriction admission let it write only its own Node. Without the option the CSR is
skipped and the Node is written with the cluster's admin client. Tokens and keys never reach
logs.

A real node opens its own TLS connection to join. The simulator plays every node in one
process, and building a client per join (a TLS context loaded from the CA, a handshake) was
8 % of the infra process's CPU in a 4 x 500 rollout, so ``TokenClients`` keeps one client per
token for the nodes that join with it (a pool's nodes share their config's token). Only the
connection is shared: each join still sends its own request with the token, so the apiserver
judges the token every time, and a revoked or expired one is refused as before.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from machinepool.runtime import ApiError, Client, Unauthorized, pki
from machinepool.simworld.kubelet.joinconfig import JoinInfo

__all__ = [
    "KUBELET_CLIENT_SIGNER",
    "JoinRejected",
    "NodeCertificate",
    "TokenClients",
    "request_client_certificate",
    "verify_join",
]

_REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
_CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
KUBELET_CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"
"""The signer of kubelets' client certificates, which the CSR approver auto-approves."""
NODES_GROUP = "system:nodes"
_USER_AGENT = "machinepool-kubelet"


class JoinRejected(Exception):
    """The workload cluster refused this node's credentials (the message says why)."""


@dataclass(frozen=True)
class NodeCertificate:
    """A node's signed client certificate and its key, and where to use them."""

    server: str
    ca_pem: bytes = field(repr=False)
    credentials: pki.KeyPair = field(repr=False)
    csr: str
    """The name of the CertificateSigningRequest it was issued for."""

    def client(self) -> Client:
        """A client authenticating as the node (call it from the event loop; close it)."""
        return Client.from_certificate(
            self.server,
            self.ca_pem,
            self.credentials.cert_pem,
            self.credentials.key_pem,
            user_agent=_USER_AGENT,
        )


def _discover(join: JoinInfo, admin_kubeconfig: dict[str, Any]) -> tuple[str, bytes]:
    """The apiserver URL the node joins and the CA it trusts, checked against the pins."""
    cluster = (admin_kubeconfig.get("clusters") or [{}])[0].get("cluster") or {}
    ca_pem = base64.b64decode(str(cluster.get("certificate-authority-data") or ""))
    if join.ca_cert_hashes and not join.unsafe_skip_ca_verification:
        pin = pki.ca_public_key_hash(ca_pem)
        if pin not in join.ca_cert_hashes:
            raise JoinRejected("cluster CA does not match discovery.bootstrapToken.caCertHashes")
    server = (
        f"https://{join.api_server_endpoint}" if join.api_server_endpoint else cluster["server"]
    )
    return str(server), ca_pem


def _token_kubeconfig(join: JoinInfo, server: str, ca_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "join",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "join", "user": {"token": join.token}}],
        "contexts": [{"name": "join", "context": {"cluster": "join", "user": "join"}}],
        "current-context": "join",
    }


class TokenClients:
    """Clients that authenticate with a bootstrap token, one per server, CA and token, kept
    for the next node joining with the same token (see the module docstring).

    At most ``keep`` are kept; the least recently used makes room, closed once no join is
    using it, so rotated tokens' clients do not pile up. Call ``close`` when done.
    """

    def __init__(self, keep: int = 32) -> None:
        self._keep = keep
        self._clients: OrderedDict[tuple[str, bytes, str], Client] = OrderedDict()
        self._users: Counter[Client] = Counter()
        self._retired: set[Client] = set()

    def __len__(self) -> int:
        return len(self._clients)

    @contextlib.asynccontextmanager
    async def use(self, join: JoinInfo, server: str, ca_pem: bytes) -> AsyncIterator[Client]:
        """The token's kept client, made on first use, for the length of the block."""
        client = await self._claim((server, ca_pem, join.token), join)
        try:
            yield client
        finally:
            self._users[client] -= 1
            if not self._users[client]:
                del self._users[client]
                if client in self._retired:
                    self._retired.discard(client)
                    await client.close()

    async def _claim(self, key: tuple[str, bytes, str], join: JoinInfo) -> Client:
        """The kept client of ``key``, counted as in use before any await can retire it."""
        if (kept := self._clients.get(key)) is None:
            server, ca_pem, _ = key
            made = await Client.from_kubeconfig_dict(
                _token_kubeconfig(join, server, ca_pem), user_agent=_USER_AGENT
            )
            if (kept := self._clients.get(key)) is not None:  # another join made one meanwhile
                self._users[kept] += 1
                await made.close()
                return kept
            kept = self._clients[key] = made
        self._clients.move_to_end(key)
        self._users[kept] += 1
        while len(self._clients) > self._keep:
            await self._retire(self._clients.popitem(last=False)[1])
        return kept

    async def _retire(self, client: Client) -> None:
        if self._users[client]:
            self._retired.add(client)
        else:
            await client.close()

    async def close(self) -> None:
        """Close every kept client (joins still using one close it when they end)."""
        while self._clients:
            await self._retire(self._clients.popitem()[1])


@contextlib.asynccontextmanager
async def _token_client(
    join: JoinInfo, server: str, ca_pem: bytes, clients: TokenClients | None
) -> AsyncIterator[Client]:
    """A kept client from ``clients``, or with none a client of this join's own."""
    if clients is not None:
        async with clients.use(join, server, ca_pem) as client:
            yield client
        return
    async with await Client.from_kubeconfig_dict(
        _token_kubeconfig(join, server, ca_pem), user_agent=_USER_AGENT
    ) as client:
        yield client


async def verify_join(
    join: JoinInfo, admin_kubeconfig: dict[str, Any], clients: TokenClients | None = None
) -> str:
    """Check the CA pin and authenticate with the token; return the user name it maps to.

    Raises ``JoinRejected`` when the pin does not match or the token is refused.
    ``clients``: where to keep the token's client for the next join (none: a client of its
    own, closed before returning).
    """
    server, ca_pem = _discover(join, admin_kubeconfig)
    async with _token_client(join, server, ca_pem, clients) as client:
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
    user = ((review.get("status") or {}).get("userInfo") or {}).get("username", "")
    if not str(user).startswith("system:bootstrap:"):
        raise JoinRejected(f"token {join.token_id} is not a bootstrap token (user {user!r})")
    return str(user)


async def request_client_certificate(
    join: JoinInfo,
    admin_kubeconfig: dict[str, Any],
    node_name: str,
    *,
    timeout: float = 30.0,
    clients: TokenClients | None = None,
) -> NodeCertificate:
    """Kubelet's TLS bootstrap: a new key, a CSR for ``system:node:<node_name>`` created with
    the bootstrap token, and the certificate once the CSR is approved and signed.

    Raises ``JoinRejected`` when the token is refused, the CSR is denied or fails, or no
    certificate is issued within ``timeout`` seconds (the next attempt starts over with a new
    key and CSR, as kubelet does after its bootstrap timeout). ``clients`` as for
    ``verify_join``.
    """
    server, ca_pem = _discover(join, admin_kubeconfig)
    request_pem, key_pem = pki.client_csr(f"system:node:{node_name}", NODES_GROUP)
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(request_pem).decode(),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],  # an EC key: no key encipherment
        },
    }
    async with _token_client(join, server, ca_pem, clients) as client:
        try:
            csr = await client.request("POST", _CSR_PATH, body=body)
        except Unauthorized as exc:
            raise JoinRejected(f"bootstrap token {join.token_id} was rejected (401)") from exc
        except ApiError as exc:
            raise JoinRejected(
                f"CSR for node {node_name} not created with token {join.token_id}: "
                f"HTTP {exc.status} {exc}"
            ) from exc
        name = str(csr["metadata"]["name"])
        cert_pem = await _issued(client, name, timeout)
    return NodeCertificate(server, ca_pem, pki.KeyPair(cert_pem, key_pem), name)


async def _issued(client: Client, name: str, timeout: float) -> bytes:
    """Poll CSR ``name`` until it carries a certificate (kubelet watches; a CSR is signed
    within a fraction of a second here, so a short poll costs less than a watch)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.05
    while True:
        try:
            csr = await client.request("GET", f"{_CSR_PATH}/{name}")
        except ApiError as exc:
            raise JoinRejected(f"CSR {name} could not be read: HTTP {exc.status}") from exc
        status = csr.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Denied", "Failed") and cond.get("status") == "True":
                why = cond.get("message") or cond.get("reason")
                raise JoinRejected(f"CSR {name} {str(cond['type']).lower()}: {why}")
        if status.get("certificate"):
            return base64.b64decode(status["certificate"])
        if loop.time() >= deadline:
            raise JoinRejected(f"CSR {name} was not signed within {timeout:g} s")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
