"""The Kubernetes client and what caches its reads: ``Client``, informers, the own-write
reader, the Patcher, the workload ``ClusterCache``, the event recorder and the contract
resolver. Below the reconcile machinery; knows nothing of controllers."""
