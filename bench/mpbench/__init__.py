"""Helpers of the benchmarks of the MachinePool system (``bench/bench_*.py``).

- ``stats``: pure figures (percentiles, /proc parsing, Prometheus text, audit-log counting);
- ``env``: the local control plane with audit logs, per-process identities and CRDs;
- ``procs``: the controller processes under test (ours, upstream Cluster API, the shared
  infrastructure process) and what they cost (CPU, RSS, reconciles);
- ``scenario``: the workload (pools created, scaled, rolled) and convergence by watching;
- ``report``: the side-by-side tables and bench/RESULTS.md;
- ``soak``: whether a series sampled over a long churn is flat or grows (``bench_soak.py``).

Nothing here runs in the test suite; pure functions have unit tests in tests/unit/test_bench_*.py.
"""
