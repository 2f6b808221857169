"""Bootstrap providers: turn a bootstrap config into the data an instance boots with.

``kubeadm`` is the only one; it is imported here so ``machinepool.bootstrap.kubeadm`` is
reachable as an attribute of this package (the app wires ``bootstrap.kubeadm.setup``).
"""

from machinepool.bootstrap import kubeadm

__all__ = ["kubeadm"]
