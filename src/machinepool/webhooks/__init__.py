"""machinepool.webhooks: the HTTPS admission and conversion server for MachinePools.

``serve()`` starts the server, ``register()`` points the apiserver at it. Defaulting and
validation follow upstream Cluster API's MachinePool webhook message for message;
conversion between v1beta1 and v1beta2 is lossless (``to_hub`` / ``from_hub``). The CLI
wires these together; tests use the same entry points.
"""

from machinepool.api.features import FeatureGateError, FeatureGates
from machinepool.webhooks.conversion import ConversionError, from_hub, to_hub
from machinepool.webhooks.machinepool import (
    AdmissionDenied,
    calculate_replicas,
    default_machine_pool,
    validate_machine_pool,
    validate_machine_pool_delete,
)
from machinepool.webhooks.registration import register, register_validation, unregister
from machinepool.webhooks.server import (
    CONVERT_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
    WebhookServer,
    serve,
)

__all__ = [
    "CONVERT_PATH",
    "MUTATE_PATH",
    "VALIDATE_PATH",
    "AdmissionDenied",
    "ConversionError",
    "FeatureGateError",
    "FeatureGates",
    "WebhookServer",
    "calculate_replicas",
    "default_machine_pool",
    "from_hub",
    "register",
    "register_validation",
    "serve",
    "to_hub",
    "unregister",
    "validate_machine_pool",
    "validate_machine_pool_delete",
]
