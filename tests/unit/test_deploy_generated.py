"""deploy/ stays generated from the package: CRD copies, clusterctl components, metadata.

Fails when someone changes the API models or deploy/config without running
``python deploy/generate.py``; the failure names the stale files and the command.
Also covers the generator's pure helpers (clusterctl variable substitution, the
self-signed overlay, the clusterctl repository layout).
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from tests.support.scripts import deploy_generator

REPO = Path(__file__).resolve().parents[2]


gen = deploy_generator()


def test_generated_files_are_current() -> None:
    stale = gen.stale_files()
    names = [str(p.relative_to(REPO)) for p in stale]
    assert not names, f"stale generated files {names}: run `python deploy/generate.py`"


def test_every_package_crd_ships_in_exactly_one_component() -> None:
    copies = [p for p in gen.crd_files() if p.name != "kustomization.yaml"]
    shipped = sorted(p.name for p in copies)
    package = sorted(p.name for p in (REPO / "src/machinepool/crds").glob("*.yaml"))
    assert shipped == package


def test_metadata_declares_contract_v1beta2_for_the_project_version() -> None:
    meta = yaml.safe_load((REPO / "deploy/release/metadata.yaml").read_text())
    assert meta["apiVersion"] == "clusterctl.cluster.x-k8s.io/v1alpha3"
    assert meta["kind"] == "Metadata"
    major, minor, _ = gen.version().split(".")
    assert {"major": int(major), "minor": int(minor), "contract": "v1beta2"} in meta[
        "releaseSeries"
    ]


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("a=${A}", {"A": "1"}, "a=1"),
        ("gate=${EXP_MACHINE_POOL:=true}", {}, "gate=true"),
        ("gate=${EXP_MACHINE_POOL:=true}", {"EXP_MACHINE_POOL": "false"}, "gate=false"),
        ("gate=${EXP_MACHINE_POOL:=true}", {"EXP_MACHINE_POOL": ""}, "gate=true"),
        ("gate=${EXP_MACHINE_POOL=true}", {"EXP_MACHINE_POOL": ""}, "gate="),
        ("n=${N:-3}", {}, "n=3"),
        ("$(POD_NAMESPACE) stays", {}, "$(POD_NAMESPACE) stays"),
    ],
)
def test_substitute_follows_clusterctl_rules(
    text: str, values: dict[str, str], expected: str
) -> None:
    assert gen.substitute(text, values) == expected


def test_substitute_names_every_missing_variable() -> None:
    with pytest.raises(gen.GenerateError, match="set these variables: A, B"):
        gen.substitute("${B} ${A} ${C:=x}", {})


def test_components_expose_the_machine_pool_feature_gate_variable() -> None:
    for comp in gen.COMPONENTS:
        text = (REPO / "deploy/release" / comp.release_file).read_text()
        assert gen.variables(text).get("EXP_MACHINE_POOL") == "true", comp.name
        assert "--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}" in text


def test_aws_components_take_credentials_from_a_variable() -> None:
    text = (REPO / "deploy/release/infrastructure-components-aws.yaml").read_text()
    assert gen.variables(text)["AWS_B64ENCODED_CREDENTIALS"] is None


def test_self_signed_overlay_builds_and_carries_the_ca(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    gen.self_signed_overlay(overlay)
    objects = gen.kustomize(overlay)
    ca = base64.b64encode((overlay / "ca.crt").read_bytes()).decode()
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    for kind, name in gen.WEBHOOK_CONFIGURATIONS:
        assert by_kind[(kind, name)]["webhooks"][0]["clientConfig"]["caBundle"] == ca
    crd = by_kind[("CustomResourceDefinition", gen.CONVERTED_CRD)]
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] == ca
    secret = by_kind[("Secret", gen.WEBHOOK_SECRET)]
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["namespace"] == gen.CORE_NAMESPACE
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert not any(o["kind"] in ("Certificate", "Issuer") for o in objects)


def test_self_signed_certificate_chains_to_its_ca_for_the_service_name(tmp_path: Path) -> None:
    from cryptography import x509

    gen.self_signed_overlay(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "machinepool-webhook-service.machinepool-system.svc" in names.get_values_for_type(
        x509.DNSName
    )
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0


def test_clusterctl_repository_layout(tmp_path: Path) -> None:
    config = yaml.safe_load(gen.clusterctl_repository(tmp_path).read_text())
    tag = f"v{gen.version()}"
    by_name = {p["name"]: p for p in config["providers"]}
    assert by_name["cluster-api"]["type"] == "CoreProvider"
    assert by_name["kubeadm"]["type"] == "BootstrapProvider"
    assert by_name["sim"]["type"] == "InfrastructureProvider"
    assert by_name["machinepool-aws"]["type"] == "InfrastructureProvider"
    sim = tmp_path / "infrastructure-sim" / tag
    assert by_name["sim"]["url"] == str((sim / "infrastructure-components.yaml").resolve())
    assert (sim / "metadata.yaml").is_file()
    assert (sim / "cluster-template-machinepool-sim.yaml").is_file()
    assert (
        tmp_path / "infrastructure-machinepool-aws" / tag / "cluster-template-machinepool-aws.yaml"
    ).exists()


def test_clusterctl_repository_lays_out_an_earlier_release_beside_this_build(
    tmp_path: Path,
) -> None:
    """The earlier release's own files in its version folder (what ``clusterctl init
    --core cluster-api:v0.1.0`` installs), this build's in its own, the config pointing at
    this build's; a component the earlier release did not ship gets no folder."""
    earlier = tmp_path / "earlier"
    (earlier / "deploy" / "release").mkdir(parents=True)
    (earlier / "deploy" / "templates").mkdir()
    (earlier / "deploy" / "release" / "core-components.yaml").write_text("# earlier core\n")
    (earlier / "deploy" / "release" / "metadata.yaml").write_text("# earlier metadata\n")
    repo = tmp_path / "repo"
    config = yaml.safe_load(
        gen.clusterctl_repository(repo, earlier={"v0.0.9": earlier}).read_text()
    )
    core = repo / "cluster-api"
    assert (core / "v0.0.9" / "core-components.yaml").read_text() == "# earlier core\n"
    assert (core / "v0.0.9" / "metadata.yaml").read_text() == "# earlier metadata\n"
    assert (core / f"v{gen.version()}" / "core-components.yaml").read_text() == (
        gen.RELEASE / "core-components.yaml"
    ).read_text()
    assert not (repo / "bootstrap-kubeadm" / "v0.0.9").exists()
    by_name = {p["name"]: p for p in config["providers"]}
    assert f"/v{gen.version()}/" in by_name["cluster-api"]["url"]


def test_metadata_lists_the_series_of_every_earlier_release() -> None:
    """``clusterctl upgrade`` reads the newest release's metadata for every installed
    version's contract: the series of deploy/releases.yaml's versions must be in it."""
    series = {(s["major"], s["minor"]) for s in yaml.safe_load(gen.metadata())["releaseSeries"]}
    major, minor, _ = (int(p) for p in gen.version().split("."))
    assert (major, minor) in series
    for release in gen.earlier_releases():
        major, minor, _ = (int(p) for p in release.version.removeprefix("v").split("."))
        assert (major, minor) in series, release


def test_clusterctl_repository_beside_upstream_leaves_upstreams_providers_alone(
    tmp_path: Path,
) -> None:
    """clusterctl reads the installed core's contract from the repository named
    ``cluster-api``: beside upstream that must stay upstream's release, not ours."""
    config = yaml.safe_load(gen.clusterctl_repository(tmp_path, beside_upstream=True).read_text())
    assert {p["name"]: p["type"] for p in config["providers"]} == {
        "machinepool": "AddonProvider",
        "sim": "InfrastructureProvider",
        "machinepool-aws": "InfrastructureProvider",
    }
