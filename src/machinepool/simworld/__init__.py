"""machinepool.simworld: the simulated world the embedded default runs on.

Everything here stands in for something outside a real management cluster: the cloud
(``cloud``: instances in Secrets, so they survive restarts; ``records``: their storage format,
a Secret per launch; ``instances``: the instances one by one from an informer of them;
``faults``: injected cloud errors, stalls and lost responses, watched per namespace) and the
machines' kubelets (``kubelet``: instances join their workload cluster as Nodes). It plays the
part boto3 and EC2 play for the AWS provider, so it sits below the providers and knows nothing
of them or of the pool engine: the sim provider (``machinepool.providers.sim``) is the
controller side that talks to this cloud.

Tests and operators use ``SimCloud`` to look at instances and inject faults::

    cloud = SimCloud(client)
    await cloud.set_faults("ns", Faults(error_rate=0.5))

The node simulator is wired separately (``await machinepool.simworld.kubelet.setup(mgr, cache)``),
since it runs as a component of its own (``--components kubelet``).
"""

from __future__ import annotations

from machinepool.simworld.cloud import (
    DEFAULT_ZONES,
    FAULTS_CONFIGMAP,
    Faults,
    RequestLimits,
    SimCloud,
)
from machinepool.simworld.faults import FaultsWatch
from machinepool.simworld.instances import Instances
from machinepool.simworld.records import INSTANCE_LABEL, InstanceRecord, provider_id

__all__ = [
    "DEFAULT_ZONES",
    "FAULTS_CONFIGMAP",
    "INSTANCE_LABEL",
    "Faults",
    "FaultsWatch",
    "InstanceRecord",
    "Instances",
    "RequestLimits",
    "SimCloud",
    "provider_id",
]
