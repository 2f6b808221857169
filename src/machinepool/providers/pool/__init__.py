"""machinepool.providers.pool: a generic pool engine for backends of single instances.

Pure parts (``plan``, ``parse_strategy``, ``template_hash``) decide; ``PoolEngine`` observes
instances, infra machines, Machines and Nodes, acts on the plan through a ``Backend`` and the
owner Machines, and reports status. Providers (``machinepool.providers.sim``) supply the
backend and their infra kinds.
"""

from machinepool.api.rollingupdate import (
    DeletePolicy,
    InvalidStrategy,
    RollingUpdate,
    parse_strategy,
)
from machinepool.providers.pool.plan import Member, Plan, PlanInput, order_victims, plan, spread
from machinepool.providers.pool.template import template_hash
from machinepool.providers.pool.types import (
    Backend,
    CapacityError,
    CloudError,
    Instance,
    InstanceSpec,
    InstanceState,
    SupportsStart,
)

__all__ = [
    "Backend",
    "CapacityError",
    "CloudError",
    "DeletePolicy",
    "Instance",
    "InstanceSpec",
    "InstanceState",
    "InvalidStrategy",
    "Member",
    "Plan",
    "PlanInput",
    "RollingUpdate",
    "SupportsStart",
    "order_victims",
    "parse_strategy",
    "plan",
    "spread",
    "template_hash",
]
