"""The repository's scripts as modules, for tests of what they generate or show.

``deploy/generate.py`` and the examples under ``docs/`` are scripts, not part of the package;
a test loads one by path, once per process (``sys.modules`` keeps it).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str) -> ModuleType:
    """The script at ``relative`` (to the repository root) as module ``name``."""
    if (loaded := sys.modules.get(name)) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def deploy_generator() -> ModuleType:
    """``deploy/generate.py``, which writes deploy/config and deploy/release."""
    return load_script("deploy/generate.py", "deploy_generate")
