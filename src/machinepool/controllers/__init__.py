"""Core Cluster API controllers: ``machinepool`` (the MachinePool reconcile) and ``machine``
(deletion of pool-owned Machines). The CLI wires each through its package's ``setup``."""
