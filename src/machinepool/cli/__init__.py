"""The ``machinepool`` command."""

from machinepool.cli.app import app, main

__all__ = ["app", "main"]
