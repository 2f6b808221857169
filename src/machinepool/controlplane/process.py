"""One supervised child process of a local control plane, with its log file.

Children are started with ``PR_SET_PDEATHSIG`` so that they die with the process that
started them, even on ``kill -9``: a crashed test run or CLI leaves no apiserver behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ProcessFailed(RuntimeError):
    """A control-plane process exited or never became ready; the message holds its log tail."""


def _die_with_parent() -> None:
    """In the child before exec: die with the parent, and take no blocked signals along.

    A parent that blocks SIGTERM to wait for it synchronously (the ``machinepool up``
    supervisor does) would otherwise hand that mask on, and a Python child would never see
    the SIGTERM meant to stop it gracefully: it would sit out the stop timeout until SIGKILL.
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now, and that this process has
    not handed out before. A server given a port keeps it across restarts, and while it is
    down the port looks free: handed to a second server then, the two would share it."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Process:
    """A named child process whose stdout and stderr go to ``<log_dir>/<name>.log``."""

    def __init__(self, name: str, argv: Sequence[str], log_dir: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        if self.running():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        log = self.log_path.open("ab")
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def check_alive(self) -> None:
        """Raise ``ProcessFailed`` with the log tail if the process has exited."""
        if self._popen is not None and self._popen.poll() is not None:
            raise ProcessFailed(
                f"{self.name} exited with code {self._popen.returncode}; "
                f"last lines of {self.log_path}:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; always reaps the child."""
        stop_all([self], timeout)

    def _terminate(self) -> subprocess.Popen[bytes] | None:
        """Send SIGTERM and forget the child; the caller reaps what is returned."""
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return None
        popen.send_signal(signal.SIGTERM)
        return popen

    def kill(self) -> None:
        """SIGKILL at once, as a crash would."""
        popen, self._popen = self._popen, None
        if popen is not None and popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(popen.pid, signal.SIGKILL)
            popen.wait()


def stop_all(processes: Iterable[Process], timeout: float = 15.0) -> None:
    """Stop several processes at once: SIGTERM to every one first, then reap each, with
    SIGKILL for any still running ``timeout`` seconds after the signal. Stopping N processes
    so costs the slowest one's shutdown, not the sum of all of them."""
    popens = [popen for proc in processes if (popen := proc._terminate()) is not None]
    deadline = time.monotonic() + timeout
    for popen in popens:
        try:
            popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def wait_until(predicate: object, timeout: float, what: str, *procs: Process) -> None:
    """Poll ``predicate()`` until true; fail early with a log tail if a process died."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            proc.check_alive()
        if predicate():
            return
        time.sleep(0.1)
    tails = "\n".join(f"--- {p.log_path}\n{p.log_tail()}" for p in procs)
    raise ProcessFailed(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
