"""``python -m machinepool`` runs the ``machinepool`` command."""

from machinepool.cli import main

main()
