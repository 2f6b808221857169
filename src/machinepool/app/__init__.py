"""The machinepool controller process: every component wired into one manager.

``run(options)`` is what ``machinepool run`` (and the container image) executes: it builds the
API client, a ``Manager`` (with Lease leader election unless disabled), the shared
``ClusterCache``, the enabled components (core, bootstrap, sim, kubelet, aws) and, optionally,
the admission and conversion webhook server, then runs until SIGTERM.
"""

from machinepool.app.components import COMPONENTS, FLAGS, Flag, component_options
from machinepool.app.process import LeaseTiming, Options, run, run_manager

__all__ = [
    "COMPONENTS",
    "FLAGS",
    "Flag",
    "LeaseTiming",
    "Options",
    "component_options",
    "run",
    "run_manager",
]
