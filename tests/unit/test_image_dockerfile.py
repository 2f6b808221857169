"""deploy/Dockerfile and the offline image build (`make image`) make the same image.

The Dockerfile is for users with a registry; `machinepool.controlplane.images.machinepool_image`
is what `make image` builds here without one. Both must start from the same Debian base, install
the same Debian packages and run the same way (environment, user, ports, entrypoint), so what the
tests find in the offline image is what a user's `docker build` gives. The image's contents are
checked in tests/integration/test_image.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from machinepool.controlplane import images

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Stage:
    base: str
    packages: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    ports: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    workdir: str = "/"
    copies: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def apt_installed(run: str) -> list[str]:
    """The packages of each `apt-get install` in a RUN's shell commands."""
    packages: list[str] = []
    for command in re.split(r"&&|;", run):
        words = shlex.split(command)
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def stages(text: str) -> list[Stage]:
    args: dict[str, str] = {}
    found: list[Stage] = []
    for word, rest in instructions(text):
        if word == "ARG" and not found:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            image = rest.split()[0]
            found.append(Stage(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)))
        elif word == "RUN":
            found[-1].packages += apt_installed(rest)
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                found[-1].env[key] = value
        elif word == "USER":
            found[-1].user = rest
        elif word == "EXPOSE":
            found[-1].ports += [p if "/" in p else f"{p}/tcp" for p in rest.split()]
        elif word == "ENTRYPOINT":
            found[-1].entrypoint = json.loads(rest)
        elif word == "WORKDIR":
            found[-1].workdir = rest
        elif word == "COPY":
            found[-1].copies.append(rest)
    return found


def runtime_stage() -> Stage:
    return stages((REPO / "deploy/Dockerfile").read_text())[-1]


SPEC = images.machinepool_image(REPO, images.project_version(REPO))


def test_same_debian_base_and_packages() -> None:
    stage = runtime_stage()
    assert SPEC.debian is not None
    assert stage.base == SPEC.debian.base_image == "debian:bookworm-slim"
    assert sorted(stage.packages) == sorted(SPEC.debian.packages)
    assert not {"python3-pip", "python3-venv", "gcc", "build-essential"} & set(stage.packages)


def test_same_environment_user_ports_and_entrypoint() -> None:
    stage = runtime_stage()
    assert stage.env == dict(SPEC.env)
    assert stage.user == SPEC.user == "65532:65532"
    assert sorted(stage.ports) == sorted(SPEC.ports)
    assert stage.entrypoint == list(SPEC.entrypoint) == ["machinepool", "run"]
    assert stage.workdir == SPEC.workdir


def test_exposed_ports_are_the_ports_the_deployments_use() -> None:
    declared = set()
    for manager in (REPO / "deploy/config").glob("*/**/manager.yaml"):
        for doc in yaml.safe_load_all(manager.read_text()):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                declared |= {f"{p['containerPort']}/tcp" for p in container.get("ports", [])}
    assert declared == set(SPEC.ports) == set(runtime_stage().ports)


def test_the_virtualenv_is_where_both_put_it() -> None:
    assert SPEC.python is not None
    prefix = SPEC.python.prefix
    assert runtime_stage().copies == [f"--from=builder {prefix} {prefix}"]
    assert SPEC.env[0] == ("PATH", f"{prefix}/bin:{images.DEFAULT_PATH}")


def test_the_wheel_is_built_from_what_the_dockerfile_copies() -> None:
    assert SPEC.python is not None
    ignore = (REPO / "deploy/Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert allowed == set(SPEC.python.inputs)


def test_parser_reads_what_a_dockerfile_says() -> None:
    parsed = stages(
        "ARG B=debian:bookworm-slim\nFROM ${B} AS x\nFROM ${B}\n"
        "RUN apt-get update \\\n && apt-get install -y --no-install-recommends a b \\\n"
        " && rm -rf /x\nENV K=v \\\n    L=w\nUSER 1:2\nEXPOSE 80 53/udp\n"
        'ENTRYPOINT ["a", "b"]\n'
    )
    assert [s.base for s in parsed] == ["debian:bookworm-slim", "debian:bookworm-slim"]
    last = parsed[-1]
    assert last.packages == ["a", "b"]
    assert last.env == {"K": "v", "L": "w"}
    assert (last.user, last.ports, last.entrypoint) == ("1:2", ["80/tcp", "53/udp"], ["a", "b"])


def test_key_follows_the_project_sources_not_their_bytecode(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'pkg'\nversion = '1'\n")
    (tmp_path / "README.md").write_text("pkg\n")
    module = tmp_path / "src" / "pkg" / "__init__.py"
    module.write_text("A = 1\n")
    spec = images.ImageSpec(
        name="pkg",
        tag="1",
        python=images.PythonProject(tmp_path, "/opt/pkg"),
        entrypoint=("pkg",),
    )
    first = images.image_key(spec)
    (tmp_path / "src" / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert images.image_key(spec) == first
    module.write_text("A = 2\n")
    assert images.image_key(spec) != first
    assert images.image_key(images.ImageSpec(**{**spec.__dict__, "user": "0"})) != first


def test_prune_keeps_the_newest_builds_of_each_tag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest builds of this version are kept, and an earlier release's one image with
    the same name (the one ``clusterctl upgrade`` is tested from) is never pushed out."""
    monkeypatch.setenv("MACHINEPOOL_CACHE", str(tmp_path))
    spec = images.ImageSpec(name="pkg", tag="0.2.0")

    def built(key: str, reference: str, age: int) -> Path:
        folder = images.cache_root() / "pkg" / key
        folder.mkdir(parents=True)
        (folder / "image.json").write_text(json.dumps({"reference": reference}))
        os.utime(folder / "image.json", (1000 - age, 1000 - age))
        return folder

    folders = [built(key, "pkg:0.2.0", age) for age, key in enumerate(["new", "mid", "old"])]
    built("earlier", "pkg:0.1.0", 10)
    half_built = images.cache_root() / "pkg" / ".tmp"
    half_built.mkdir()
    assert images.prune(spec, keep=2) == folders[2:]
    left = sorted(p.name for p in (images.cache_root() / "pkg").iterdir())
    assert left == [".tmp", "earlier", "mid", "new"]


def test_check_says_in_one_line_why_it_cannot_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(images.os, "geteuid", lambda: 1000)
    assert images.main(["--check"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "needs root" in line
    monkeypatch.setattr(images.shutil, "which", lambda command: None)
    with pytest.raises(images.ImageBuildUnavailable, match="apt-get install runc"):
        images.ensure_tools(("runc",))
