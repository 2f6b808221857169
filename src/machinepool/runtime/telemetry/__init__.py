"""Structured logging and Prometheus metrics: what every other room of the runtime reports
through, so it imports none of them."""
