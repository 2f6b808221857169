"""machinepool: Cluster API's MachinePool system in Python.

The package is layered; each layer imports only the ones below it:

    cli -> controllers, bootstrap, providers, kubelet, webhooks -> controlplane -> runtime -> api
"""

__version__ = "0.2.0"
__all__ = ["__version__"]
