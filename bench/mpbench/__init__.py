"""Helpers of ``bench/bench_machinepool.py``: the benchmark of the MachinePool system.

- ``stats``: pure figures (percentiles, /proc parsing, Prometheus text, audit-log counting);
- ``env``: the local control plane with audit logs, per-process identities and CRDs;
- ``procs``: the controller processes under test (ours, upstream Cluster API, the shared
  infrastructure process) and what they cost (CPU, RSS, reconciles);
- ``scenario``: the workload (pools created, scaled, rolled) and convergence by watching;
- ``report``: the side-by-side tables and bench/RESULTS.md.

Nothing here runs in the test suite; pure functions have unit tests in tests/unit/test_bench_*.py.
"""
