"""Our MachinePool, MachineHealthCheck and MachineDrainRule v1beta2 schemas against upstream
Cluster API v1.14's, field by field.

Downloads the newest v1.14 patch of sigs.k8s.io/cluster-api with the Go toolchain (module
cache under ~/.cache/machinepool, nothing in the repo) and compares every field path of
upstream's v1beta2 schema with ours: type, format, bounds, pattern, enum, list semantics.
Without Go or network this test fails; it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from machinepool.api.crdgen import crd_manifests

MODULE = "sigs.k8s.io/cluster-api"
CRD_DIR = "core/config/crd/bases"
COMPARED = (
    "type",
    "format",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "enum",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)

# Every known, intentional difference, with why. Anything else fails the test.
MACHINE_POOL_DIFFERENCES: dict[tuple[str, str], str] = {
    (".spec.template.metadata", "minProperties"): (
        "we do not set minProperties: an empty object is harmless and our models cannot say it"
    ),
    (".spec.template.spec.deletion", "minProperties"): (
        "no minProperties; defaulting always sets nodeDeletionTimeoutSeconds anyway"
    ),
    (".status", "minProperties"): "no minProperties on status objects",
    (".status.initialization", "minProperties"): "no minProperties on status objects",
    (".status.deprecated.v1beta1.conditions[].status", "minLength"): (
        "our shared v1beta1 condition model requires a non-empty status (stricter)"
    ),
    (".status.versions", "minItems"): (
        "status writers may send an empty list; upstream relies on omitempty instead"
    ),
    (".status.versions[].replicas", "minimum"): (
        "status writers may report a version with 0 replicas during scale-down"
    ),
}

MACHINE_HEALTH_CHECK_DIFFERENCES: dict[tuple[str, str], str] = {
    (".status.deprecated.v1beta1.conditions[].status", "minLength"): (
        "our shared v1beta1 condition model requires a non-empty status (stricter)"
    ),
}

KNOWN_DIFFERENCES: dict[str, dict[tuple[str, str], str]] = {
    "MachineDrainRule": {},
    "MachinePool": MACHINE_POOL_DIFFERENCES,
    "MachineHealthCheck": MACHINE_HEALTH_CHECK_DIFFERENCES,
}


def _go_env(tmp: Path) -> dict[str, str]:
    cache = Path.home() / ".cache" / "machinepool" / "gomod"
    cache.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "GOMODCACHE": str(cache), "GOFLAGS": "-mod=mod", "GOWORK": "off"}


def _go(args: list[str], tmp: Path) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert Path(go).exists(), "the Go toolchain is required to fetch upstream's CRD"
    done = subprocess.run(
        [go, *args], cwd=tmp, env=_go_env(tmp), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"go {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def _upstream_crd(tmp: Path, plural: str) -> dict[str, Any]:
    versions = _go(["list", "-m", "-versions", MODULE], tmp).split()[1:]
    v114 = [v for v in versions if v.startswith("v1.14.") and "-" not in v]
    assert v114, f"no v1.14 release of {MODULE} among {versions[-5:]}"
    newest = max(v114, key=lambda v: int(v.rsplit(".", 1)[1]))
    info = json.loads(_go(["mod", "download", "-json", f"{MODULE}@{newest}"], tmp))
    return dict(
        yaml.safe_load(
            (Path(info["Dir"]) / CRD_DIR / f"cluster.x-k8s.io_{plural}.yaml").read_text()
        )
    )


def _schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    entry = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return dict(entry["schema"]["openAPIV3Schema"])


def _fields(schema: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    found = {path: {k: schema[k] for k in COMPARED if k in schema}}
    for name, child in (schema.get("properties") or {}).items():
        found |= _fields(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found |= _fields(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found |= _fields(schema["additionalProperties"], f"{path}{{}}")
    return found


@pytest.mark.parametrize("kind", sorted(KNOWN_DIFFERENCES))
def test_v1beta2_schema_matches_upstream(tmp_path: Path, kind: str) -> None:
    ours_crd = next(m for m in crd_manifests() if m["spec"]["names"]["kind"] == kind)
    upstream = _fields(
        _schema(_upstream_crd(tmp_path, ours_crd["spec"]["names"]["plural"]), "v1beta2")
    )
    known = KNOWN_DIFFERENCES[kind]
    ours = _fields(_schema(ours_crd, "v1beta2"))
    problems = []
    seen_known = set()
    for path, want in sorted(upstream.items()):
        if path not in ours:
            problems.append(f"{path or '<root>'}: missing (upstream {want})")
            continue
        have = ours[path]
        for key in sorted(set(want) | set(have)):
            if want.get(key) == have.get(key):
                continue
            if (path, key) in known:
                seen_known.add((path, key))
                continue
            problems.append(f"{path}: {key} upstream={want.get(key)!r} ours={have.get(key)!r}")
    stale = set(known) - seen_known
    assert not problems, "schema differs from upstream:\n" + "\n".join(problems)
    assert not stale, f"listed differences that no longer exist, remove them: {sorted(stale)}"
