"""The real node's pure parts: containerd's TOML, the prerequisites line, addresses per folder."""

from __future__ import annotations

import ipaddress
import sys
import tomllib
from pathlib import Path

import pytest

from machinepool.controlplane import node
from machinepool.controlplane.node import Node, RealNode, is_static_elf, missing_prerequisites


def test_containerd_config_is_toml_that_reads_back_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sandbox image is named after the host's busybox, which a machine without the
    # node's packages lacks; the TOML does not depend on which version it is.
    monkeypatch.setattr(node.nodeimage, "busybox_version", lambda: "1.0")
    n = Node(RealNode(), tmp_path / "node", tmp_path)
    config_path = Path(n._containerd_argv()[-1])

    config = tomllib.loads(config_path.read_text())

    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False}
    assert config["grpc"]["address"] == str(n.socket)
    assert config["root"].startswith(str(tmp_path))
    assert config["state"].startswith(str(tmp_path))


def test_each_folder_gets_its_own_link_names_and_addresses(tmp_path: Path) -> None:
    a = Node(RealNode(), tmp_path / "a", tmp_path)
    b = Node(RealNode(), tmp_path / "b", tmp_path)

    assert {a.netns, a.host_link, a.chain}.isdisjoint({b.netns, b.host_link, b.chain})
    for n in (a, b):
        link = ipaddress.ip_network(f"{n.host_address}/30", strict=False)
        assert ipaddress.ip_address(n.address) in link
        assert link.subnet_of(ipaddress.ip_network("10.243.0.0/16"))
        assert len(n.host_link) <= 15  # Linux's limit on interface names
    assert Node(RealNode(), tmp_path / "a", tmp_path).address == a.address


def test_missing_packages_are_named_in_one_line_with_the_command_that_installs_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(node.os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", str(tmp_path))  # none of the commands
    monkeypatch.setattr(node, "CNI_BIN_DIRS", (tmp_path,))

    line = missing_prerequisites()

    assert line is not None
    assert "\n" not in line
    for package in ("containerd", "runc", "containernetworking-plugins", "iptables", "umoci"):
        assert package in line
    assert "apt-get install -y" in line


def test_without_root_the_line_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.os, "geteuid", lambda: 1000)

    assert missing_prerequisites() == (
        "the real node needs root (network namespaces, cgroups, mounts): run as root"
    )


def elf(*program_header_types: int) -> bytes:
    """A 64-bit little-endian ELF header with program headers of these types."""
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[0x20:0x28] = (64).to_bytes(8, "little")  # e_phoff: right after the header
    header[0x36:0x38] = (56).to_bytes(2, "little")  # e_phentsize
    header[0x38:0x3A] = len(program_header_types).to_bytes(2, "little")
    return bytes(header) + b"".join(
        t.to_bytes(4, "little") + bytes(52) for t in program_header_types
    )


def test_only_an_executable_without_an_interpreter_is_static(tmp_path: Path) -> None:
    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    static.write_bytes(elf(1, 1))  # PT_LOAD
    dynamic.write_bytes(elf(6, 3, 1))  # PT_PHDR, PT_INTERP, PT_LOAD

    assert is_static_elf(static)
    assert not is_static_elf(dynamic)
    assert not is_static_elf(Path(sys.executable).resolve())
    assert not is_static_elf(tmp_path / "absent")
