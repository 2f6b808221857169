"""stop_all: several processes stop together, so ``machinepool down`` costs the slowest
shutdown, not the sum of them.

Each child, on SIGTERM, notes it in a shared file and finishes only once every child has
noted one: stopped one after another, the first would wait for the others' signal until
SIGKILL; stopped together, all finish on their own. Counted, not timed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from machinepool.controlplane.process import Process, stop_all

CHILD = """
import signal, sys, time, pathlib
board, me, total = pathlib.Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def on_term(*_):
    with board.open("a") as f:
        f.write(f"term {me}\\n")
    while sum(l.startswith("term") for l in board.read_text().splitlines()) < total:
        time.sleep(0.01)
    with board.open("a") as f:
        f.write(f"exited {me}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(board.parent / f"ready-{me}").touch()
while True:
    time.sleep(1)
"""


def test_stop_all_signals_every_process_before_waiting_for_any(tmp_path: Path) -> None:
    board = tmp_path / "board"
    board.touch()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    procs = [
        Process(f"child-{i}", [sys.executable, str(script), str(board), str(i), "4"], tmp_path)
        for i in range(4)
    ]
    for proc in procs:
        proc.start()
    while len(list(tmp_path.glob("ready-*"))) < len(procs):  # handlers installed
        time.sleep(0.01)
    stop_all(procs, timeout=30)
    lines = board.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("exited")) == [
        f"exited {i}" for i in range(4)
    ], "every child finished on its own, none needed SIGKILL"
    assert not any(proc.running() for proc in procs)
