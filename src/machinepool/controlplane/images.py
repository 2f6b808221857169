"""Container images built offline: Debian packages, a Python project, files, into an OCI image.

No registry is reached and nothing is pulled: the root filesystem comes from Debian packages
(``mmdebstrap`` from the machine's apt sources), a Python project is installed with its
dependencies from PyPI into a virtualenv inside it, and ``umoci`` assembles the layers as an OCI
image. ``skopeo`` writes the same image as a docker archive, which ``ctr -n k8s.io images import``
loads into a node's containerd. Called by ``make image`` (``hack/image/build.sh``), by the tests
that run the image, and by whatever else needs an image built the same way (a pause image for a
node, cert-manager's controllers)::

    spec = ImageSpec(
        name="pause", tag="3.10",
        debian=None,                                    # no packages: only the files below
        files=(AddFile(Path("/path/to/pause"), "/pause"),),
        entrypoint=("/pause",), user="65535:65535",
    )
    image = build(spec)          # -> BuiltImage: image.layout, image.archive, image.size
    print(image.describe())

Everything is kept in the cache (``$MACHINEPOOL_CACHE`` or ``~/.cache/machinepool``), under
``images/<name>/<key>/``, where the key is a hash of everything the image is made from (the spec,
the apt sources, the files' and the project's contents, this builder), so building an image that
was built before is a no-op. The Debian layer has a key of its own (``images/debian/``), so a
change to the project rebuilds only the layer above it.

Building needs root (mmdebstrap's root mode and chroot). A missing tool is installed with apt
when running as root, and named with its package otherwise (``ImageBuildUnavailable``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BUILDER_VERSION = "1"
"""Part of every key: bump it when a change here changes what an image holds."""

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Debian's PATH, which images of its base images carry."""

SLIM_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)
"""dpkg filters of Debian's ``-slim`` images: no documentation, manuals or translations."""

TOOLS = {"mmdebstrap": "mmdebstrap", "umoci": "umoci", "skopeo": "skopeo"}
"""Command -> the Debian package that has it."""

KEEP = 3
"""Builds of one image kept in the cache (each a few hundred MiB); older ones are deleted."""

Log = Callable[[str], None]


class ImageBuildUnavailable(RuntimeError):
    """This machine cannot build images (not root, or a tool missing that cannot be installed)."""


class ImageBuildFailed(RuntimeError):
    """A step of the build failed; the message has the command and its output's tail."""


@dataclass(frozen=True)
class Debian:
    """The Debian root filesystem an image starts from."""

    packages: tuple[str, ...] = ()
    """Installed on top of the variant, without Recommends (as ``--no-install-recommends``)."""
    suite: str = "bookworm"
    variant: str = "minbase"
    """mmdebstrap's variant: ``minbase`` is what ``debian:<suite>-slim`` holds."""
    slim: bool = True
    """dpkg leaves out documentation, manuals and translations, as the ``-slim`` images do."""

    @property
    def base_image(self) -> str:
        """The registry image with the same contents: a Dockerfile's ``FROM``."""
        return f"debian:{self.suite}-slim" if self.variant == "minbase" and self.slim else ""


@dataclass(frozen=True)
class PythonProject:
    """A Python project installed from its wheel, with its dependencies, into a virtualenv."""

    source: Path
    """The folder holding its ``pyproject.toml``."""
    prefix: str
    """The virtualenv's folder in the image, e.g. ``/opt/machinepool``."""
    inputs: tuple[str, ...] = ("pyproject.toml", "README.md", "src")
    """What the wheel is built from, relative to ``source`` (part of the key)."""


@dataclass(frozen=True)
class AddFile:
    """A file from this machine, put into the image at ``path``."""

    source: Path
    path: str
    mode: int = 0o755


@dataclass(frozen=True)
class ImageSpec:
    """What an image is made of and how it runs: everything its key is computed from."""

    name: str
    tag: str
    debian: Debian | None = field(default_factory=Debian)
    """``None``: no Debian layer, the image holds only ``files`` (and a project, if any)."""
    python: PythonProject | None = None
    files: tuple[AddFile, ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = "65532:65532"
    env: tuple[tuple[str, str], ...] = (("PATH", DEFAULT_PATH),)
    workdir: str = "/"
    ports: tuple[str, ...] = ()
    """Exposed ports, ``8080/tcp``."""

    @property
    def reference(self) -> str:
        return f"{self.name}:{self.tag}"


@dataclass(frozen=True)
class BuiltImage:
    """An image in the cache."""

    spec: ImageSpec
    folder: Path
    key: str

    @property
    def layout(self) -> Path:
        """The OCI image layout (tag ``spec.tag``): ``umoci unpack --image <layout>:<tag>``."""
        return self.folder / "oci"

    @property
    def archive(self) -> Path:
        """A docker archive of the image for ``ctr -n k8s.io images import``."""
        return self.folder / "image.tar"

    @property
    def summary(self) -> dict[str, object]:
        """What the build recorded: sizes, layers, Debian packages, Python distributions."""
        loaded: dict[str, object] = json.loads((self.folder / "image.json").read_text())
        return loaded

    @property
    def size(self) -> int:
        """Bytes of the unpacked layers."""
        value = self.summary["size"]
        assert isinstance(value, int)
        return value

    def describe(self) -> str:
        s = self.summary
        return (
            f"image {self.spec.reference}: {_mib(self.size)} unpacked, "
            f"{_mib(int(str(s['compressed'])))} compressed, {s['layers']} layer(s); "
            f"{self.archive}"
        )


def cache_root() -> Path:
    root = os.environ.get("MACHINEPOOL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "machinepool"
    )
    return Path(root) / "images"


def repository_root() -> Path | None:
    """The source checkout this module runs from, if it runs from one."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "deploy" / "Dockerfile").exists() and (parent / "pyproject.toml").exists():
            return parent
    return None


def machinepool_image(repo: Path, version: str) -> ImageSpec:
    """The controller image: ``machinepool run`` with the package in ``/opt/machinepool``.

    ``deploy/Dockerfile`` builds the same image from registry base images; a unit test holds
    the two to the same packages, environment, user and entrypoint.
    """
    prefix = "/opt/machinepool"
    return ImageSpec(
        name="machinepool",
        tag=version,
        debian=Debian(packages=("python3",)),
        python=PythonProject(source=repo, prefix=prefix),
        entrypoint=("machinepool", "run"),
        user="65532:65532",
        env=(
            ("PATH", f"{prefix}/bin:{DEFAULT_PATH}"),
            ("PYTHONDONTWRITEBYTECODE", "1"),
            ("PYTHONUNBUFFERED", "1"),
            ("HOME", "/tmp"),
            ("MPLCONFIGDIR", "/tmp/matplotlib"),
        ),
        # webhooks, diagnostics (/metrics) and probes, as deploy/config's Deployments name them
        ports=("9443/tcp", "8443/tcp", "9440/tcp"),
    )


def project_version(repo: Path) -> str:
    import tomllib

    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def previous_release(repo: Path) -> tuple[str, str]:
    """The newest release before this build, as deploy/releases.yaml names it: its version
    (``0.1.0``) and its commit."""
    listed = yaml.safe_load((repo / "deploy" / "releases.yaml").read_text()) or []
    if not listed:
        raise ImageBuildUnavailable("deploy/releases.yaml names no earlier release")
    newest = listed[0]
    return str(newest["version"]).removeprefix("v"), str(newest["commit"])


def release_tree(repo: Path, version: str, commit: str) -> Path:
    """The source of an earlier release: ``git archive`` of its commit, unpacked once into the
    cache (a commit's tree never changes, so the folder is named by it)."""
    folder = cache_root().parent / "src" / f"machinepool-{version}-{commit[:12]}"
    if (folder / "pyproject.toml").exists():
        return folder
    found = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                           capture_output=True, check=False)  # fmt: skip
    if found.returncode != 0:
        raise ImageBuildUnavailable(
            f"release v{version}'s commit {commit[:12]} (deploy/releases.yaml) is not in this "
            "checkout: clone the repository with its history (`git fetch --unshallow`)"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent) as tmp:
        archive = Path(tmp) / "source.tar"
        _run(["git", "-C", str(repo), "archive", "--output", str(archive), commit])
        tree = Path(tmp) / "tree"
        tree.mkdir()
        _run(["tar", "-xf", str(archive), "-C", str(tree)])
        shutil.rmtree(folder, ignore_errors=True)
        tree.rename(folder)
    return folder


# -- keys -------------------------------------------------------------------------------------


def apt_sources(suite: str) -> list[tuple[str, str]]:
    """The apt sources the Debian layer is built from, as (file suffix, text) pairs.

    This machine's own (``/etc/apt/sources.list`` and ``sources.list.d``) when it runs
    ``suite``, so the image comes from the mirror and snapshot its packages do; otherwise
    Debian's mirror, with the suite's updates and security archives.
    """
    release = Path("/etc/os-release")
    codename = ""
    if release.exists():
        for line in release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    if codename == suite:
        listed = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
        found = [
            (path.suffix, path.read_text())
            for path in listed
            if path.is_file() and path.suffix in (".list", ".sources")
        ]
        if found:
            return found
    mirror = "http://deb.debian.org"
    return [
        (
            ".list",
            f"deb {mirror}/debian {suite} main\n"
            f"deb {mirror}/debian {suite}-updates main\n"
            f"deb {mirror}/debian-security {suite}-security main\n",
        )
    ]


def _tree_digest(root: Path, inputs: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for name in inputs:
        top = root / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            rel = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts or rel.endswith(".pyc") or ".egg-info" in rel:
                continue
            digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def debian_key(debian: Debian) -> str:
    payload = {
        "builder": BUILDER_VERSION,
        "suite": debian.suite,
        "variant": debian.variant,
        "packages": sorted(debian.packages),
        "slim": debian.slim,
        "sources": apt_sources(debian.suite),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def image_key(spec: ImageSpec) -> str:
    """A hash of everything ``spec`` builds from: the same key, the same image."""
    payload: dict[str, object] = {
        "builder": BUILDER_VERSION,
        "name": spec.name,
        "tag": spec.tag,
        "debian": debian_key(spec.debian) if spec.debian else None,
        "python": None
        if spec.python is None
        else {
            "prefix": spec.python.prefix,
            "tree": _tree_digest(spec.python.source, spec.python.inputs),
        },
        "files": [[f.path, f.mode, _file_digest(f.source)] for f in spec.files],
        "entrypoint": list(spec.entrypoint),
        "cmd": list(spec.cmd),
        "user": spec.user,
        "env": [list(e) for e in spec.env],
        "workdir": spec.workdir,
        "ports": list(spec.ports),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def cached(spec: ImageSpec) -> BuiltImage | None:
    """The image ``spec`` describes, if it was built before."""
    image = BuiltImage(spec, cache_root() / spec.name / image_key(spec), image_key(spec))
    return image if (image.folder / "image.json").exists() else None


# -- tools ------------------------------------------------------------------------------------


def missing_tools(commands: Iterable[str] = TOOLS) -> list[str]:
    return [c for c in commands if shutil.which(c) is None]


def unavailable_reason(commands: Iterable[str] = TOOLS) -> str | None:
    """Why images cannot be built here, in one line; ``None`` when they can."""
    if os.geteuid() != 0:
        return "building images needs root (mmdebstrap's root mode and chroot)"
    missing = missing_tools(commands)
    if missing and shutil.which("apt-get") is None:
        packages = " ".join(TOOLS.get(c, c) for c in missing)
        return f"no apt-get to install the Debian package(s) {packages}"
    return None


def ensure_tools(commands: Iterable[str] = TOOLS, log: Log = print) -> None:
    """Install the Debian packages of missing commands (as root), or say which are missing."""
    wanted = list(commands)
    reason = unavailable_reason(wanted)
    missing = missing_tools(wanted)
    if not missing:
        return
    packages = sorted({TOOLS.get(c, c) for c in missing})
    if reason is not None:
        raise ImageBuildUnavailable(
            f"{reason}; install the Debian package(s) {' '.join(packages)} (apt-get install "
            f"{' '.join(packages)}) as root"
        )
    log(f"installing the Debian package(s) {' '.join(packages)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], env=env)
    _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages], env=env)


def _run(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, env=env, cwd=cwd
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise ImageBuildFailed(f"{' '.join(argv)} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def _chroot(root: Path, argv: Sequence[str]) -> str:
    """Run a command inside ``root`` with a clean environment (none of this machine's)."""
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LC_ALL": "C.UTF-8"}
    return _run(["chroot", str(root), *argv], env=env)


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


# -- building ---------------------------------------------------------------------------------


def build(spec: ImageSpec, *, log: Log = print) -> BuiltImage:
    """Build ``spec`` into the cache, or return it from there; print what it built."""
    found = cached(spec)
    if found is not None:
        return found
    if spec.python is not None and spec.debian is None:
        raise ValueError(f"image {spec.reference}: a Python project needs a Debian python3")
    ensure_tools(log=log)
    key = image_key(spec)
    folder = cache_root() / spec.name / key
    started = time.monotonic()
    log(f"building image {spec.reference} into {folder}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{key}.", dir=folder.parent) as tmp:
        work = Path(tmp)
        layers: list[Path] = []
        summary: dict[str, object] = {"reference": spec.reference, "key": key}
        root = work / "root"
        root.mkdir()
        if spec.debian is not None:
            base = debian_layer(spec.debian, log=log)
            layers.append(base)
            _run(["tar", "-xpf", str(base), "-C", str(root)])
            summary["debian"] = _dpkg_packages(root)
        top = work / "layer.tar"
        members: list[str] = []
        if spec.python is not None:
            summary["python"] = _install_project(spec.python, root, work, log=log)
            members.append(spec.python.prefix)
        for added in spec.files:
            target = root / added.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(added.source, target)
            target.chmod(added.mode)
            members.append(added.path)
        if members:
            _write_layer(root, members, top)
            layers.append(top)
        summary["size"] = sum(_unpacked_size(layer) for layer in layers)
        summary["layers"] = len(layers)
        layout = work / "oci"
        summary["compressed"] = _assemble(spec, layers, layout)
        _run(
            [
                "skopeo",
                "--insecure-policy",
                "copy",
                "--quiet",
                f"oci:{layout}:{spec.tag}",
                f"docker-archive:{work / 'image.tar'}:{spec.reference}",
            ]
        )
        shutil.rmtree(root)
        top.unlink(missing_ok=True)
        (work / "image.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        work.rename(folder)
        work.mkdir()  # for TemporaryDirectory's cleanup
    image = BuiltImage(spec, folder, key)
    log(f"built {image.describe()} in {time.monotonic() - started:.0f}s")
    prune(spec)
    return image


def prune(spec: ImageSpec, keep: int = KEEP) -> list[Path]:
    """Delete all but the ``keep`` newest builds of ``spec``'s name and tag; returns what it
    deleted. Per tag, so that the builds of this version never push out the one image of an
    earlier release (``machinepool-previous``) that shares the name."""

    def same_tag(folder: Path) -> bool:
        built = folder / "image.json"
        return built.exists() and json.loads(built.read_text()).get("reference") == spec.reference

    builds = sorted(
        (folder for folder in (cache_root() / spec.name).glob("*") if same_tag(folder)),
        key=lambda folder: (folder / "image.json").stat().st_mtime,
        reverse=True,
    )
    for folder in builds[keep:]:
        shutil.rmtree(folder, ignore_errors=True)
    return builds[keep:]


def debian_layer(debian: Debian, *, log: Log = print) -> Path:
    """The root filesystem of ``debian`` as a layer tarball, built once per key."""
    folder = cache_root() / "debian"
    layer = folder / f"{debian.suite}-{debian_key(debian)}.tar"
    if layer.exists():
        return layer
    folder.mkdir(parents=True, exist_ok=True)
    debs = folder / "debs" / debian.suite
    debs.mkdir(parents=True, exist_ok=True)
    log(f"building the Debian {debian.suite} layer ({', '.join(debian.packages) or 'no packages'})")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        sources = []
        for number, (suffix, text) in enumerate(apt_sources(debian.suite)):
            sources.append(Path(tmp) / f"{number}{suffix}")
            sources[-1].write_text(text)
        out = Path(tmp) / "layer.tar"
        archives = "var/cache/apt/archives"
        argv = [
            "mmdebstrap",
            "--mode=root",
            f"--variant={debian.variant}",
            "--format=tar",
            "--aptopt=APT::Install-Recommends false",
            # .debs kept between builds (mmdebstrap's own recipe), so a second Debian layer
            # downloads only what is new
            "--skip=essential/unlink",
            f'--setup-hook=mkdir -p "$1/{archives}"',
            f"--setup-hook=sync-in {debs} /{archives}",
            f"--customize-hook=sync-out /{archives} {debs}",
        ]
        if debian.packages:
            argv.append(f"--include={','.join(debian.packages)}")
        if debian.slim:
            argv += [f"--dpkgopt={rule}" for rule in SLIM_EXCLUDES]
        argv += [debian.suite, str(out), *map(str, sources)]
        env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
        _run(argv, env=env)
        out.rename(layer)
    return layer


def _dpkg_packages(root: Path) -> list[str]:
    listing = _chroot(root, ["dpkg-query", "-W", "-f", "${Package}=${Version}\n"])
    return sorted(line for line in listing.splitlines() if line)


def _target_tags(root: Path) -> tuple[str, str, str]:
    """The image's Python version, glibc version and machine, asked of its own interpreter."""
    out = _chroot(
        root,
        [
            "python3",
            "-c",
            "import platform, sys; "
            "print('%d.%d' % sys.version_info[:2], platform.libc_ver()[1], platform.machine())",
        ],
    )
    version, glibc, machine = out.split()
    return version, glibc, machine


def _install_project(project: PythonProject, root: Path, work: Path, *, log: Log) -> list[str]:
    """Build the project's wheel here, fetch its dependencies' wheels, install them in the image.

    The wheels are chosen for the image's interpreter (its version and glibc), fetched by this
    machine's pip, and installed inside the image by a pip run from its wheel, which the image
    does not keep: the image gets neither pip nor a build tool.
    """
    wheels = work / "wheels"
    wheels.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    log(f"building the wheel of {project.source}")
    _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(project.source)])
    (wheel,) = wheels.glob("*.whl")
    version, glibc, machine = _target_tags(root)
    major, minor = (int(part) for part in glibc.split("."))
    platforms = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    platforms += [f"manylinux{tag}_{machine}" for tag in ("2014", "2010", "1")]
    log(f"fetching its dependencies for Python {version}, glibc {glibc} ({machine})")
    _run(
        [
            *pip,
            "download",
            "--quiet",
            "--only-binary=:all:",
            f"--python-version={version}",
            "--implementation=cp",
            *(f"--platform={p}" for p in platforms),
            "--dest",
            str(wheels),
            str(wheel),
            "pip",
        ]
    )
    (pip_wheel,) = (w for w in wheels.glob("pip-*.whl"))
    inside = root / "tmp" / "wheels"
    shutil.copytree(wheels, inside)
    _chroot(root, ["python3", "-m", "venv", "--without-pip", project.prefix])
    name = wheel.name.split("-")[0]
    _chroot(
        root,
        [
            f"{project.prefix}/bin/python",
            f"/tmp/wheels/{pip_wheel.name}/pip",
            "install",
            "--quiet",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links=/tmp/wheels",
            name,
        ],
    )
    shutil.rmtree(inside)
    shutil.rmtree(wheels)
    # pip's bytecode is checked against its sources' mtimes, which the layer sets to 0 (for
    # the same bytes from the same inputs): every import would compile again, in memory on a
    # read-only root (a manager took 47 s to start on a loaded node). Hash-based bytecode,
    # not checked against the sources, is valid whatever the mtimes; the image never changes.
    _chroot(
        root,
        [
            f"{project.prefix}/bin/python",
            "-c",
            "import compileall, py_compile, sys; compileall.compile_dir(sys.argv[1], quiet=2, "
            "force=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
            project.prefix,
        ],
    )
    listing = _chroot(
        root,
        [
            f"{project.prefix}/bin/python",
            "-c",
            "import importlib.metadata as m; "
            "print('\\n'.join(sorted(f'{d.name}=={d.version}' for d in m.distributions())))",
        ],
    )
    return [line for line in listing.splitlines() if line]


def _write_layer(root: Path, members: Iterable[str], out: Path) -> None:
    """A layer of ``members`` (paths in the image) and their parent folders, owned by root."""
    seen: set[str] = set()

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for member in sorted(members):
            rel = Path(member.lstrip("/"))
            for parent in reversed(rel.parents[:-1]):
                if parent.as_posix() not in seen:
                    seen.add(parent.as_posix())
                    tar.add(root / parent, parent.as_posix(), recursive=False, filter=owned_by_root)
            tar.add(root / rel, rel.as_posix(), filter=owned_by_root)


def _unpacked_size(layer: Path) -> int:
    with tarfile.open(layer) as tar:
        return sum(m.size for m in tar.getmembers() if m.isfile())


def _assemble(spec: ImageSpec, layers: Sequence[Path], layout: Path) -> int:
    """The OCI layout of ``spec`` from its layers; returns the compressed layers' bytes."""
    image = f"{layout}:{spec.tag}"
    _run(["umoci", "init", "--layout", str(layout)])
    _run(["umoci", "new", "--image", image])
    for layer in layers:
        _run(["umoci", "raw", "add-layer", "--image", image, "--no-history", str(layer)])
    config = [
        "umoci",
        "config",
        "--image",
        image,
        "--no-history",
        "--os=linux",
        f"--config.user={spec.user}",
        f"--config.workingdir={spec.workdir}",
        "--clear=config.env",
        "--clear=config.entrypoint",
        "--clear=config.cmd",
    ]
    config += [f"--config.env={k}={v}" for k, v in spec.env]
    config += [f"--config.entrypoint={arg}" for arg in spec.entrypoint]
    config += [f"--config.cmd={arg}" for arg in spec.cmd]
    config += [f"--config.exposedports={port}" for port in spec.ports]
    _run(config)
    _run(["umoci", "gc", "--layout", str(layout)])
    index = json.loads((layout / "index.json").read_text())
    manifest = _blob(layout, index["manifests"][0]["digest"])
    return sum(int(layer["size"]) for layer in json.loads(manifest)["layers"])


def _blob(layout: Path, digest: str) -> bytes:
    algorithm, value = digest.split(":", 1)
    return (layout / "blobs" / algorithm / value).read_bytes()


def image_config(image: BuiltImage) -> dict[str, object]:
    """The OCI image configuration (``config`` of the image's config blob)."""
    index = json.loads((image.layout / "index.json").read_text())
    manifest = json.loads(_blob(image.layout, index["manifests"][0]["digest"]))
    config: dict[str, object] = json.loads(_blob(image.layout, manifest["config"]["digest"]))
    return config


# -- command ----------------------------------------------------------------------------------


def named(name: str) -> ImageSpec:
    """The images this checkout knows how to build, by name."""
    repo = repository_root()
    if repo is None:
        raise ImageBuildUnavailable("images are built from a source checkout of machinepool")
    if name == "machinepool":
        return machinepool_image(repo, project_version(repo))
    if name == "machinepool-previous":
        # The previous release, built by this builder from its own source (what `clusterctl
        # upgrade` is tested from): the image its components name, machinepool:<its version>.
        version, commit = previous_release(repo)
        return machinepool_image(release_tree(repo, version, commit), version)
    raise SystemExit(f"unknown image {name!r}: known: machinepool, machinepool-previous")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m machinepool.controlplane.images", description=__doc__.split("\n")[0]
    )
    parser.add_argument("name", nargs="?", default="machinepool")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 0 when the image is cached or can be built here; otherwise say why",
    )
    args = parser.parse_args(argv)
    try:
        spec = named(args.name)
    except ImageBuildUnavailable as error:
        print(f"{'' if args.check else 'error: '}{error}", file=sys.stderr)
        return 1
    if args.check:
        # Root even for a cached image: running it (runc, umoci unpack) needs root too.
        reason = unavailable_reason(() if cached(spec) is not None else TOOLS)
        if reason is not None:
            print(reason, file=sys.stderr)
        return 0 if reason is None else 1
    try:
        image = build(spec, log=lambda line: print(line, file=sys.stderr))
    except (ImageBuildUnavailable, ImageBuildFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(image.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
