"""YAML parsed with libyaml when PyYAML was built with it.

Kubeconfigs and cloud-configs are parsed on busy paths: each simulated join parses its
cloud-config and its cluster's kubeconfig, and each bootstrap config the workload kubeconfig
Secret. libyaml's safe loader reads the same documents as PyYAML's pure-Python one, about ten
times faster. In the benchmark's 1,000-pool create the bootstrap's pure-Python read of the
kubeconfig took about 6 % of the shared infra process's CPU (py-spy); with libyaml the
process used 144 CPU seconds instead of 153 (bench/RESULTS.md at fdf29f1, finding 2).
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YAML_LOADER", "load_yaml"]

YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader, else the pure-Python one (for ``yaml.load_all`` too)."""


def load_yaml(text: str | bytes) -> Any:
    """``yaml.safe_load``, with libyaml when available."""
    return yaml.load(text, Loader=YAML_LOADER)
