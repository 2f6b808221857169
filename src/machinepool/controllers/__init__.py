"""Core Cluster API controllers: ``machinepool`` (the MachinePool reconcile), ``machine``
(deletion of pool-owned Machines) and ``machinehealthcheck``; ``core`` wires the three as the
``core`` component of ``machinepool run``."""
