"""The controller image `make image` builds offline, opened and run as a node would run it.

The image comes from the cache (`make test` builds it before the session, `hack/image/build.sh`),
so this file costs seconds once it is built. Its OCI configuration is read from the layout, its
layers unpacked by umoci, and `machinepool` run in it by runc (a Debian package, as the node's
containerd uses) as the image's user, 65532, on a read-only root with /tmp as the only writable
place, as deploy/config's Pods run it.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from machinepool.controlplane import images

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
VERSION = images.project_version(REPO)


@pytest.fixture(scope="module")
def image() -> images.BuiltImage:
    return images.build(images.named("machinepool"))


@pytest.fixture(scope="module")
def bundle(image: images.BuiltImage, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image unpacked as an OCI runtime bundle: rootfs/ and umoci's config.json."""
    images.ensure_tools(("umoci", "runc"))
    folder = tmp_path_factory.mktemp("bundle") / "machinepool"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{image.layout}:{image.spec.tag}", str(folder)],
        check=True,
        capture_output=True,
    )
    return folder


@pytest.fixture
def run_in_image(bundle: Path, tmp_path: Path) -> Iterator[RunInImage]:
    runner = RunInImage(bundle, tmp_path / "runc")
    yield runner
    runner.cleanup()


class RunInImage:
    """Runs a command in the bundle with runc: the image's user and environment, root read-only."""

    def __init__(self, bundle: Path, state: Path) -> None:
        self.bundle, self.state = bundle, state
        self.ids: list[str] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        config = json.loads((self.bundle / "config.json").read_text())
        config["root"]["readonly"] = True
        config["process"]["terminal"] = False
        config["process"]["args"] = list(args)
        config["mounts"].append(
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=64m"],
            }
        )
        # A bundle of its own per run (runc reads <bundle>/config.json), over the one rootfs.
        config["root"]["path"] = str(self.bundle / "rootfs")
        container = f"mp-image-{uuid.uuid4().hex[:8]}"
        run_bundle = self.state.parent / container
        run_bundle.mkdir(parents=True)
        (run_bundle / "config.json").write_text(json.dumps(config))
        self.ids.append(container)
        return subprocess.run(
            ["runc", "--root", str(self.state), "run", "--bundle", str(run_bundle), container],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def cleanup(self) -> None:
        for container in self.ids:
            subprocess.run(
                ["runc", "--root", str(self.state), "delete", "--force", container],
                capture_output=True,
                check=False,
            )


def test_config_runs_machinepool_run_as_65532(image: images.BuiltImage) -> None:
    config = images.image_config(image)
    assert config["os"] == "linux"
    runtime = config["config"]
    assert isinstance(runtime, dict)
    assert runtime["Entrypoint"] == ["machinepool", "run"]
    assert runtime["User"] == "65532:65532"
    env = dict(pair.split("=", 1) for pair in runtime["Env"])
    assert env["PATH"].startswith("/opt/machinepool/bin:")
    assert env["HOME"] == "/tmp"
    assert set(runtime["ExposedPorts"]) == {"9443/tcp", "8443/tcp", "9440/tcp"}


def test_archive_is_what_ctr_imports(image: images.BuiltImage) -> None:
    with tarfile.open(image.archive) as archive:
        handle = archive.extractfile("manifest.json")
        assert handle is not None
        (manifest,) = json.load(handle)
    # The name the manifests run (what `docker build -t machinepool:<version>` tags, too).
    named = {
        line.split("image:", 1)[1].strip()
        for manager in (REPO / "deploy/config").glob("*/**/manager.yaml")
        for line in manager.read_text().splitlines()
        if line.strip().startswith("image:")
    }
    assert manifest["RepoTags"] == sorted(named) == [f"docker.io/library/machinepool:{VERSION}"]
    assert len(manifest["Layers"]) == image.summary["layers"] == 2


def test_rootfs_has_debian_python_our_package_and_no_build_tools(
    image: images.BuiltImage, bundle: Path
) -> None:
    rootfs = bundle / "rootfs"
    packages = {line.split("=")[0] for line in image.summary["debian"]}  # type: ignore[attr-defined]
    assert "python3" in packages
    assert not {"python3-pip", "python3-venv", "gcc", "cpp", "make"} & packages
    site = next((rootfs / "opt/machinepool/lib").glob("python3.*/site-packages"))
    assert (site / f"machinepool-{VERSION}.dist-info").is_dir()
    assert not list(site.glob("pip*")), "pip is in the image"
    assert not (rootfs / "opt/machinepool/bin/pip").exists()
    assert not list((rootfs / "usr/bin").glob("gcc*"))
    assert (rootfs / "opt/machinepool/bin/python3").readlink() == Path("/usr/bin/python3")
    assert not (rootfs / "usr/share/doc/python3/changelog.Debian.gz").exists()  # slim, as -slim


def test_machinepool_runs_as_non_root_on_a_read_only_root(run_in_image: RunInImage) -> None:
    result = run_in_image("machinepool", "run", "--help")
    assert result.returncode == 0, result.stderr
    assert "--components" in result.stdout

    probe = (
        "import importlib.metadata as m, json, os\n"
        "try:\n"
        "    open('/opt/machinepool/x', 'w')\n"
        "    root = 'writable'\n"
        "except OSError as e:\n"
        "    root = e.strerror\n"
        "open('/tmp/ok', 'w').write('ok')\n"
        "import machinepool.app.process\n"
        "print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'root': root,"
        " 'version': m.version('machinepool')}))\n"
    )
    result = run_in_image("python3", "-c", probe)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen == {
        "uid": 65532,
        "gid": 65532,
        "root": "Read-only file system",
        "version": VERSION,
    }


def test_an_image_of_files_only_as_a_pause_image_would_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same builder, no Debian layer: one file, its mode, the user and entrypoint given."""
    monkeypatch.setenv("MACHINEPOOL_CACHE", str(tmp_path / "cache"))
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF stand-in bytes\n")
    spec = images.ImageSpec(
        name="pause",
        tag="3.10",
        debian=None,
        files=(images.AddFile(binary, "/usr/local/bin/pause"),),
        entrypoint=("/usr/local/bin/pause",),
        user="65535:65535",
        env=(),
    )
    built = images.build(spec)
    recorded = (built.folder / "image.json").stat().st_mtime_ns
    again = images.build(spec)  # a second build is the cached one, not rebuilt
    assert (again.folder, (again.folder / "image.json").stat().st_mtime_ns) == (
        built.folder,
        recorded,
    )
    runtime = images.image_config(built)["config"]
    assert runtime == {
        "User": "65535:65535",
        "Entrypoint": ["/usr/local/bin/pause"],
        "WorkingDir": "/",
    }
    unpacked = tmp_path / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{built.layout}:3.10", str(unpacked)],
        check=True,
        capture_output=True,
    )
    placed = unpacked / "rootfs/usr/local/bin/pause"
    assert placed.read_bytes() == binary.read_bytes()
    assert placed.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in (unpacked / "rootfs").iterdir()) == ["usr"]


def test_bytecode_is_used_not_compiled_again_at_each_start(run_in_image: RunInImage) -> None:
    """The layer's files all have mtime 0, so bytecode checked against source mtimes would be
    stale and every start would compile every module again (in memory: the root is
    read-only); a manager then took 47 s to start on a loaded node."""
    result = run_in_image("python3", "-v", "-c", "import machinepool.app.process")
    assert result.returncode == 0, result.stderr
    loaded = [
        line.removeprefix("# code object from ").strip("'")
        for line in result.stderr.splitlines()
        if line.startswith("# code object from") and "/opt/machinepool/lib/" in line
    ]
    compiled = [path for path in loaded if path.endswith(".py")]
    assert loaded, result.stderr[-2000:]
    assert compiled == [], f"{len(compiled)} modules compiled from source, e.g. {compiled[:3]}"
