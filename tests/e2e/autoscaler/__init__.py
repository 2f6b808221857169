"""End-to-end tests that run the upstream cluster-autoscaler against machinepool."""
