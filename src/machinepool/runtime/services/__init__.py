"""Process services: the ``Manager`` that runs controllers, Lease leader election, the
secure diagnostics endpoint, and the PKI and serving certificates. The top room of the
runtime."""
