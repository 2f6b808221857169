"""A real node for the local management cluster: kubelet, containerd, runc, a CNI bridge and
kube-proxy, in a network namespace of its own.

``ControlPlane(node=RealNode())`` starts one (``RealNode`` says what it needs: root, and Debian's
containerd, runc, containernetworking-plugins, iptables, umoci and busybox-static). Everything
it creates is its own and is removed by ``stop``, or by the next start in the same directory
after a crash:

- a network namespace ``machinepool-<id>`` (``<id>``: six hex digits of the directory's path)
  holding containerd, kubelet, kube-proxy, the CNI bridge ``mp-pods0`` with the Pods' veths
  and ``eth0``, the node's address; kube-proxy's and the bridge plugin's iptables rules live
  there too, and go with it;
- the veth ``mpn-<id>`` on the host, the other end of ``eth0``, with the host's address of the
  link (the apiserver's advertised address), and one host iptables chain
  ``MP-NODE-<id>`` that forwards connections to that address's apiserver port (and each
  workload apiserver's, ``forward``) to the apiserver on 127.0.0.1 (``route_localnet`` on
  that veth only), so the apiservers keep listening on loopback alone; with
  ``RealNode(routed_pods=True)`` also a host route of the Pods' subnet over that veth, so the
  apiserver reaches the Pods serving webhooks;
- a cgroup ``/machinepool-node-<id>`` in every cgroup v1 hierarchy, holding the node's
  processes, its containerd shims, and (as the kubelet's ``cgroupRoot``) the Pods (runc
  mirrors the Pods' cgroups into the hybrid mount's cgroup v2, which is removed too);
- containerd's config, socket, state and root, the kubelet's root and the Pod logs, all under
  the node's directory; its mounts there are unmounted on stop.

Pods reach the apiserver as in a real cluster, through the ``kubernetes`` Service (kube-proxy
in iptables mode); the apiserver reaches the kubelet at the node's address for logs and exec.
Traffic goes over loopback, the veth pair and the bridge only: the namespace has no default
route, and the host does not forward.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from machinepool.controlplane import nodeimage
from machinepool.controlplane.binaries import optional_binary
from machinepool.controlplane.process import Process, ProcessFailed, wait_until
from machinepool.runtime import pki

_START_TIMEOUT = 60.0
CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_BRIDGE = "mp-pods0"
_LINK_RANGE = ipaddress.IPv4Network("10.243.0.0/16")
_PACKAGES = (
    # (what is looked for, the Debian package that has it)
    ("containerd", "containerd"),
    ("ctr", "containerd"),
    ("runc", "runc"),
    ("iptables", "iptables"),
    ("umoci", "umoci"),
    ("nsenter", "util-linux"),
    ("ip", "iproute2"),
)
APT_PACKAGES = (
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "umoci",
    "busybox-static",
)
"""What ``.ci/run`` installs for the real node."""


class NodeUnavailable(RuntimeError):
    """This machine cannot run the real node; the message says, in one line, how to fix it."""


@dataclass(frozen=True)
class RealNode:
    """A real node for the management cluster (see the module docstring for what it creates).

    With one, the management cluster is also one Pods live in: its controller-manager runs the
    node lifecycle, pod garbage collector, Deployment and ReplicaSet controllers and a
    kube-scheduler binds Pods (as ``PodLifecycle`` does for a workload cluster), the apiserver
    authorizes kubelets with the Node authorizer and NodeRestriction, and advertises the host's
    end of the node's link, which is what the ``kubernetes`` Service's endpoints then hold.
    """

    name: str = "node-1"
    """The Node's name (its kubelet's ``--hostname-override``)."""
    pod_subnet: str = "10.244.0.0/24"
    """The Pods' addresses (the bridge's host-local range, kube-proxy's cluster CIDR)."""
    routed_pods: bool = False
    """The host routes ``pod_subnet`` to this node, and the apiserver dials webhooks (and
    aggregated APIs) at their Services' endpoints, the Pods, as a control-plane host does: for
    webhooks served by Pods. Nodes running at once on this machine need subnets of their own."""


def missing_prerequisites() -> str | None:
    """One line naming what this machine lacks for a real node and how to get it, or None."""
    if os.geteuid() != 0:
        return "the real node needs root (network namespaces, cgroups, mounts): run as root"
    problems: list[str] = []
    packages = sorted(
        {package for command, package in _PACKAGES if shutil.which(command) is None}
        | ({"containernetworking-plugins"} if cni_bin_dir() is None else set())
        | ({"busybox-static"} if not is_static_elf(nodeimage.BUSYBOX) else set())
    )
    if packages:
        problems.append(
            f"missing Debian packages {' '.join(packages)}: "
            f"apt-get update && apt-get install -y {' '.join(packages)}"
        )
    if not Path("/proc/sys/net/bridge").is_dir():
        problems.append("no br_netfilter in the kernel: modprobe br_netfilter")
    if not (_CGROUP_ROOT / "pids" / "cgroup.procs").exists():
        problems.append("no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
    if optional_binary("kubelet") is None or optional_binary("kube-proxy") is None:
        problems.append("no kubelet or kube-proxy built: run hack/controlplane/build.sh")
    return "; ".join(problems) or None


def cni_bin_dir() -> Path | None:
    for folder in CNI_BIN_DIRS:
        if all(os.access(folder / p, os.X_OK) for p in ("bridge", "host-local")):
            return folder
    return None


def is_static_elf(path: Path) -> bool:
    """``path`` is a 64-bit ELF executable without an interpreter (no PT_INTERP program
    header): Debian's ``busybox`` package has a dynamic ``/bin/busybox``, which an image
    without libc cannot run; ``busybox-static`` has a static one."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:5] != b"\x7fELF\x02":  # 64-bit only
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3A], "little")
    for i in range(phnum):
        p_type = int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little")
        if p_type == 3:  # PT_INTERP
            return False
    return True


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


Kubeconfig = Callable[[str, str, pki.KeyPair], dict[str, Any]]
"""``(server, user, client certificate) -> kubeconfig``: the cluster's own kubeconfig maker."""


class Node:
    """One real node: created by ``ControlPlane`` before its management apiserver starts
    (``prepare``: the network and cgroups), started once the apiserver listens (``start``)."""

    def __init__(self, spec: RealNode, directory: Path, binaries: Path) -> None:
        self.spec = spec
        self.dir = directory
        self._binaries = binaries
        self.id = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:6]
        self.netns = f"machinepool-{self.id}"
        self.host_link = f"mpn-{self.id}"
        self.chain = f"MP-NODE-{self.id}"
        self.cgroup = f"machinepool-node-{self.id}"
        self.network_name = f"machinepool-{self.id}"
        link = list(_LINK_RANGE.subnets(new_prefix=30))[int(self.id, 16) % 16384]
        self.host_address = str(link.network_address + 1)
        """The host's end of the node's link: the apiserver's advertised address."""
        self.address = str(link.network_address + 2)
        """The Node's InternalIP."""
        self._state = directory / "containerd" / "state"
        self.socket = directory / "containerd" / "containerd.sock"
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        self.kube_proxy: Process | None = None
        self.image = ""
        """The busybox image's reference in the node's containerd, once started."""

    # -- lifecycle ----------------------------------------------------------------------

    def prepare(self) -> None:
        """Remove what a crashed run left, then create the network namespace, the link and
        the cgroups."""
        problem = missing_prerequisites()
        if problem is not None:
            raise NodeUnavailable(problem)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stop()
        try:
            self._create_network()
            for hierarchy in self._hierarchies():
                path = hierarchy / self.cgroup
                path.mkdir(exist_ok=True)
                for name in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset is empty otherwise
                    if (path / name).exists() and not (path / name).read_text().strip():
                        (path / name).write_text((hierarchy / name).read_text())
        except BaseException:
            self.stop()
            raise

    def start(self, port: int, ca: pki.KeyPair, ca_crt: Path, kubeconfig: Kubeconfig) -> None:
        """Forward the link's apiserver port to ``127.0.0.1:port``, then start containerd,
        import the image, and start kubelet and kube-proxy."""
        self.forward(port)
        server = f"https://{self.host_address}:{port}"
        self.containerd = self._start("containerd", self._containerd_argv())
        wait_until(self._containerd_ready, _START_TIMEOUT, "containerd", self.containerd)
        archive = nodeimage.build_archive()
        self.image = nodeimage.image_reference()
        _run(
            *self._ctr(), "images", "import", "--base-name", nodeimage.IMAGE_NAME, str(archive),
        )  # fmt: skip
        kubelet_id = pki.issue(ca, f"system:node:{self.spec.name}", organization="system:nodes")
        self.kubelet = self._start(
            "kubelet", self._kubelet_argv(kubeconfig(server, "kubelet", kubelet_id), ca_crt)
        )
        proxy_id = pki.issue(ca, "system:kube-proxy")
        self.kube_proxy = self._start(
            "kube-proxy", self._kube_proxy_argv(kubeconfig(server, "kube-proxy", proxy_id))
        )

    def forward(self, port: int, *, remove: bool = False) -> None:
        """Make ``127.0.0.1:port`` on the host reachable from the node and its Pods at
        ``host_address:port`` (a rule in the node's chain; ``remove``: take it out again).
        The management apiserver's port is forwarded by ``start``; ``ControlPlane`` forwards
        each workload apiserver's too."""
        _run(
            "iptables", "-w", "-t", "nat", "-D" if remove else "-A", self.chain, "-p", "tcp",
            "-d", self.host_address, "--dport", str(port),
            "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}",
        )  # fmt: skip

    def load_image(self, archive: Path) -> None:
        """Import a docker archive (``images.BuiltImage.archive``) into the node's containerd,
        under the names it carries, as ``ctr -n k8s.io images import`` does on a node."""
        _run(*self._ctr(), "images", "import", str(archive))

    def stop(self) -> None:
        """Stop everything the node runs and remove everything it created (idempotent)."""
        for proc in (self.kube_proxy, self.kubelet):
            if proc is not None:
                proc.stop()
        if self.socket.exists() and self._containerd_ready():
            self._remove_containers()
        if self.containerd is not None:
            self.containerd.stop()
        self.kubelet = self.kube_proxy = self.containerd = None
        self._kill_cgroup_processes()
        self._unmount()
        _run("ip", "netns", "delete", self.netns, check=False)
        while _run(*self._jump_rule("-D"), check=False).returncode == 0:
            pass
        _run("iptables", "-w", "-t", "nat", "-F", self.chain, check=False)
        _run("iptables", "-w", "-t", "nat", "-X", self.chain, check=False)
        # runc also mirrors the Pods' cgroups into the hybrid mount's cgroup v2 ("unified")
        for hierarchy in (*self._hierarchies(), _CGROUP_ROOT / "unified"):
            _remove_cgroup_tree(hierarchy / self.cgroup)
        self._remove_host_files()
        shutil.rmtree(self._state, ignore_errors=True)
        shutil.rmtree(self.dir / "cni-ipam", ignore_errors=True)

    def processes(self) -> Iterator[Process]:
        yield from (p for p in (self.containerd, self.kubelet, self.kube_proxy) if p is not None)

    def check_alive(self) -> None:
        """Raise ``ProcessFailed`` with its log tail if a process of the node has exited."""
        for proc in self.processes():
            proc.check_alive()

    # -- network ------------------------------------------------------------------------

    def _in_netns(self, *argv: str) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv]

    def _jump_rule(self, op: str) -> tuple[str, ...]:
        return ("iptables", "-w", "-t", "nat", op, "PREROUTING", "-i", self.host_link,
                "-j", self.chain)  # fmt: skip

    def _create_network(self) -> None:
        ns = self.netns
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", self.host_link, "type", "veth",
             "peer", "name", "eth0", "netns", ns)  # fmt: skip
        _run("ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        _run("ip", "link", "set", self.host_link, "up")
        if self.spec.routed_pods:  # the route goes with the link
            _run("ip", "route", "add", self.spec.pod_subnet, "via", self.address,
                 "dev", self.host_link)  # fmt: skip
        _run("ip", "-n", ns, "addr", "add", f"{self.address}/30", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run(*self._in_netns("sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
                             "net.bridge.bridge-nf-call-iptables=1"))  # fmt: skip
        _run("sysctl", "-q", "-w", f"net.ipv4.conf.{self.host_link}.route_localnet=1")
        _run("iptables", "-w", "-t", "nat", "-N", self.chain)
        _run(*self._jump_rule("-A"))

    # -- processes ----------------------------------------------------------------------

    def _start(self, name: str, argv: list[str]) -> Process:
        """Start a process in the node's network namespace, inside the node's cgroups."""
        proc = Process(f"node-{name}", self._in_netns(*argv), self.dir)
        proc.start()
        for hierarchy in self._hierarchies():
            with contextlib.suppress(ProcessLookupError, OSError):
                (hierarchy / self.cgroup / "cgroup.procs").write_text(str(proc.pid))
        return proc

    def _ctr(self) -> tuple[str, ...]:
        return ("ctr", "--address", str(self.socket), "--namespace", "k8s.io")

    def _containerd_ready(self) -> bool:
        return _run(*self._ctr(), "version", check=False).returncode == 0

    def _containerd_argv(self) -> list[str]:
        base = self.dir / "containerd"
        base.mkdir(parents=True, exist_ok=True)
        cni_conf = self.dir / "cni"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-machinepool.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        cri = {
            "sandbox_image": nodeimage.image_reference(),
            "restrict_oom_score_adj": True,  # the sandbox's root may not lower oom_score_adj
            "enable_selinux": False,
            "netns_mounts_under_state_dir": True,  # Pods' namespaces: not in /run/netns
            "containerd": {
                "snapshotter": "overlayfs",
                "default_runtime_name": "runc",
                "runtimes": {
                    "runc": {
                        "runtime_type": "io.containerd.runc.v2",
                        "options": {"SystemdCgroup": False},
                    }
                },
            },
            "cni": {"bin_dir": str(cni_bin_dir()), "conf_dir": str(cni_conf), "max_conf_num": 1},
        }
        config = {
            "version": 2,
            "root": str(base / "root"),
            "state": str(self._state),
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": ""},
            "debug": {"address": ""},
            "metrics": {"address": ""},
            "plugins": {
                "io.containerd.grpc.v1.cri": cri,
                "io.containerd.internal.v1.opt": {"path": str(base / "opt")},
            },
        }
        path = base / "config.toml"
        path.write_text(_toml(config))
        return ["containerd", "--config", str(path)]

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": self.network_name,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": _BRIDGE,
                    "isGateway": True,
                    "ipMasq": True,  # Pods reach the host's end of the link as the node
                    "hairpinMode": True,  # a Pod reaches itself through a Service
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.spec.pod_subnet}]],
                        # via the bridge; the node's namespace routes only its link onwards
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni-ipam"),
                    },
                },
            ],
        }

    def _kubelet_argv(self, kubeconfig: dict[str, Any], ca_crt: Path) -> list[str]:
        root = self.dir / "kubelet"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(ca_crt)},
            },
            "authorization": {"mode": "Webhook"},
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "podLogsDir": str(self.dir / "pod-logs"),
            "resolvConf": "",
            "failSwapOn": False,
            # The machine's disk is shared: never evict or collect images for its usage.
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "rotateCertificates": False,
        }
        config_path = self.dir / "kubelet.yaml"
        config_path.write_text(yaml.safe_dump(config))
        kubeconfig_path = _write_private(self.dir / "kubelet.kubeconfig", kubeconfig)
        return [
            str(self._binary("kubelet")),
            f"--config={config_path}",
            f"--kubeconfig={kubeconfig_path}",
            f"--root-dir={root}",
            f"--node-ip={self.address}",
            f"--hostname-override={self.spec.name}",
        ]

    def _kube_proxy_argv(self, kubeconfig: dict[str, Any]) -> list[str]:
        kubeconfig_path = _write_private(self.dir / "kube-proxy.kubeconfig", kubeconfig)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig_path)},
            "hostnameOverride": self.spec.name,
            "clusterCIDR": self.spec.pod_subnet,
            "metricsBindAddress": "127.0.0.1:10249",
            "healthzBindAddress": "127.0.0.1:10256",
            # conntrack's table size is the host's: leave it, and its timeouts, alone
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        config_path = self.dir / "kube-proxy.yaml"
        config_path.write_text(yaml.safe_dump(config))
        return [str(self._binary("kube-proxy")), f"--config={config_path}"]

    def _binary(self, name: str) -> Path:
        own = self._binaries / name
        found = own if os.access(own, os.X_OK) else optional_binary(name)
        if found is None:
            raise NodeUnavailable(f"no {name} built: run hack/controlplane/build.sh")
        return found

    # -- teardown -----------------------------------------------------------------------

    def _remove_containers(self) -> None:
        """Kill and delete every task and container, so their shims exit and clean up."""
        tasks = _run(*self._ctr(), "tasks", "ls", "-q", check=False).stdout.split()
        for task in tasks:
            _run(*self._ctr(), "tasks", "kill", "--signal", "SIGKILL", task, check=False)
        for task in tasks:
            _run(*self._ctr(), "tasks", "delete", "--force", task, check=False)
        containers = _run(*self._ctr(), "containers", "ls", "-q", check=False).stdout.split()
        if containers:
            _run(*self._ctr(), "containers", "delete", *containers, check=False)

    def _hierarchies(self) -> list[Path]:
        """The cgroup v1 hierarchies (every one a process belongs to, named or not)."""
        if not _CGROUP_ROOT.is_dir():
            return []
        return sorted(
            d for d in _CGROUP_ROOT.iterdir() if d.name != "unified" and (d / "tasks").exists()
        )

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        top = _CGROUP_ROOT / "pids" / self.cgroup
        for folder, _dirs, _files in os.walk(top):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (Path(folder) / "cgroup.procs").read_text().split())
        return pids

    def _kill_cgroup_processes(self) -> None:
        """SIGKILL whatever still runs in the node's cgroups (shims, containers) until none do."""
        deadline = time.monotonic() + 15
        while pids := self._cgroup_pids():
            if time.monotonic() > deadline:
                raise ProcessFailed(f"processes {sorted(pids)} of {self.cgroup} survive SIGKILL")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def _unmount(self) -> None:
        """Unmount, deepest first, whatever the kubelet and containerd mounted under the
        node's directory (volumes, the kubelet's root, sandboxes' shm, rootfs overlays)."""
        top = str(self.dir.resolve())
        for _ in range(5):
            mounts = [m for m in _mount_points() if m == top or m.startswith(top + "/")]
            if not mounts:
                return
            for mount in sorted(mounts, key=len, reverse=True):
                _run("umount", "--lazy", mount, check=False)

    def _remove_host_files(self) -> None:
        """What the kubelet and the CNI plugins write outside the node's directory: the
        kubelet's links to container logs, and libcni's cached results of our network."""
        top = str(self.dir.resolve())
        logs = Path("/var/log/containers")
        if logs.is_dir():
            for link in logs.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(top):
                        link.unlink()
        results = Path("/var/lib/cni/results")
        cri = self.dir / "containerd" / "root" / "io.containerd.grpc.v1.cri"
        sandboxes = cri / "sandboxes"
        ids = [d.name for d in sandboxes.iterdir()] if sandboxes.is_dir() else []
        if results.is_dir():
            for cached in results.glob(f"{self.network_name}-*"):
                cached.unlink(missing_ok=True)
            for sandbox in ids:  # containerd's own loopback network, one per sandbox
                (results / f"cni-loopback-{sandbox}-lo").unlink(missing_ok=True)
        for folder in ("sandboxes", "containers"):  # of containers deleted above
            shutil.rmtree(cri / folder, ignore_errors=True)


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            points.append(point.encode().decode("unicode_escape"))
    return points


def _remove_cgroup_tree(path: Path) -> None:
    if not path.is_dir():
        return
    for folder, _dirs, _files in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _write_private(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path


def _toml(table: dict[str, Any], prefix: str = "") -> str:
    """The TOML for a table of strings, numbers, booleans and nested tables (all that
    containerd's configuration needs): plain keys first, then each sub-table."""
    lines: list[str] = []
    subtables: list[str] = []
    for key, value in table.items():
        if isinstance(value, dict):
            name = f'{prefix}."{key}"' if prefix else f'"{key}"'
            subtables.append(f"\n[{name}]\n" + _toml(value, name))
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "".join(subtables) + ("\n" if not prefix else "")
