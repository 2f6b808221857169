"""Names the kubeadm bootstrap controller reads and writes: resources, labels, finalizer,
condition types and reasons.

Condition types and the v1beta1 reasons match upstream's KubeadmConfig; the v1beta2 reasons
of a ``False`` DataSecretAvailable say *what* is awaited (upstream writes ``NotAvailable`` and
puts that in the message), which is easier to alert on.
"""

from __future__ import annotations

from typing import Final

from machinepool.api import constants as c
from machinepool.api.kinds import KUBEADM_CONFIGS as KUBEADM_CONFIGS
from machinepool.api.kinds import MACHINE_POOLS as MACHINE_POOLS
from machinepool.api.kinds import MACHINES as MACHINES

KUBEADM_CONFIG_API_VERSION: Final = f"{c.BOOTSTRAP_GROUP}/{c.V1BETA2}"

FINALIZER: Final = "kubeadmconfig.bootstrap.cluster.x-k8s.io"
"""Set on every config by earlier versions, until its bootstrap tokens were deleted; no longer
set, only released (``controller``'s docstring says why)."""
DATA_TOKEN_ID_ANNOTATION: Final = "bootstrap.cluster.x-k8s.io/bootstrap-token-id"
"""On the data Secret: the id (public half) of the token its cloud-config carries."""
CLUSTER_SECRET_TYPE: Final = "cluster.x-k8s.io/secret"
FORMAT_CLOUD_CONFIG: Final = "cloud-config"
FORMAT_IGNITION: Final = "ignition"
COMPONENT: Final = "kubeadm-bootstrap-controller"

# Condition types (v1beta2 and v1beta1 share the names).
READY: Final = c.READY_CONDITION
DATA_SECRET_AVAILABLE: Final = c.DATA_SECRET_AVAILABLE_CONDITION
CERTIFICATES_AVAILABLE: Final = c.CERTIFICATES_AVAILABLE_CONDITION
PAUSED: Final = c.PAUSED_CONDITION

# Reasons.
AVAILABLE: Final = c.AVAILABLE_REASON
NOT_AVAILABLE: Final = c.NOT_AVAILABLE_REASON
WAITING_FOR_CLUSTER: Final = "WaitingForCluster"

POOL_CONFIG_INDEX: Final = "kubeadm-bootstrap/pool-config"
"""On MachinePools: ``namespace/name`` of the KubeadmConfig each references."""
WAITING_FOR_CLUSTER_INFRASTRUCTURE: Final = "WaitingForClusterInfrastructure"
WAITING_FOR_CONTROL_PLANE: Final = "WaitingForControlPlaneAvailable"
WAITING_FOR_KUBECONFIG: Final = "WaitingForKubeconfigSecret"
WAITING_FOR_ENDPOINT: Final = "WaitingForControlPlaneEndpoint"
WAITING_FOR_WORKLOAD_CLUSTER: Final = "WaitingForWorkloadCluster"
GENERATION_FAILED: Final = "DataSecretGenerationFailed"
CERTIFICATES_CORRUPTED: Final = "CertificatesCorrupted"
INTERNAL_ERROR: Final = c.INTERNAL_ERROR_REASON
