"""The reconcile machinery: the ``Controller`` (work queue, workers, the Result/error
contract), the reconcile driver (``phases``), pacing of progress writes, bounded gathers, and
sharding (which keys this replica reconciles).
Built on ``runtime.kube``."""
