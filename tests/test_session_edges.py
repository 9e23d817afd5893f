"""The edges of a session (issue 31, part 6): Ctrl-C in the `kwh sql` prompt, archives in an ingested
folder, and captures that legitimately hold no CUDA data."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import kwarehouse
from conftest import DATA

from kwarehouse import pipeline
from kwarehouse.store import Warehouse

# -- Ctrl-C in the kwh sql prompt ------------------------------------------------------------------

# A cross join of 10^15 rows (the small side is built first: a big one would fill memory before any cancel): it never ends by itself, so only a cancel gets the prompt back.
ENDLESS_QUERY = b"SELECT count(*) FROM range(1000000000) a, range(1000000) b WHERE (a.range + b.range) % 7 = 3;\n"


class Terminal:
    """`kwh sql` on a real pseudo-terminal (stdin is a tty, so the interactive prompt runs)."""

    def __init__(self, args: list[str], home: Path):
        env = {**os.environ, "HOME": str(home), "TERM": "dumb",
               "PYTHONPATH": str(Path(kwarehouse.__file__).parents[1])}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:   # the child: a session leader whose controlling terminal is the pty
            os.execve(sys.executable, [sys.executable, "-m", "kwarehouse", *args], env)
        self.output = b""          # printed and not yet matched by expect
        self.transcript = b""      # everything printed

    def expect(self, text: bytes, timeout: float = 60) -> None:
        """Read until `text` has been printed (after what earlier expects consumed)."""
        end = time.monotonic() + timeout
        while text not in self.output:
            left = end - time.monotonic()
            assert left > 0, f"{text!r} never came; the terminal shows:\n{self.output.decode(errors='replace')}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:      # the child is gone (EIO on Linux)
                    chunk = b""
                assert chunk, f"kwh sql ended before printing {text!r}:\n{self.output.decode(errors='replace')}"
                self.output += chunk
                self.transcript += chunk
        self.output = self.output.split(text, 1)[1]

    def type(self, text: bytes) -> None:
        os.write(self.fd, text)

    def exit_status(self, timeout: float = 30) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    self.transcript += os.read(self.fd, 4096)
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("kwh sql did not exit")

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)


def test_ctrl_c_cancels_the_running_query_and_the_prompt_goes_on(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    pipeline.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    terminal = Terminal(["--warehouse", str(warehouse.root), "sql"], tmp_path)
    try:
        terminal.expect(b"kwh> ")
        terminal.type(ENDLESS_QUERY)
        terminal.expect(b"% 7 = 3;")      # the line is echoed: the prompt has it, the query starts
        time.sleep(1.5)                   # ... and is running
        terminal.type(b"\x03")            # Ctrl-C: the terminal sends SIGINT to the foreground process
        terminal.expect(b"cancelled", timeout=30)
        terminal.expect(b"kwh> ")
        # the connection still answers, and the statement after a cancel is not the cancelled one
        terminal.type(b"SELECT 40 + 2 AS answer, count(*) AS kernels FROM kernels;\n")
        terminal.expect(b"42")
        terminal.expect(b"kwh> ")
        # again, with the signal itself (what the terminal's Ctrl-C sends)
        terminal.type(ENDLESS_QUERY)
        terminal.expect(b"% 7 = 3;")
        time.sleep(1.5)
        os.kill(terminal.pid, signal.SIGINT)
        terminal.expect(b"cancelled", timeout=30)
        terminal.expect(b"kwh> ")
        terminal.type(b".quit\n")
        assert terminal.exit_status() == 0
        assert b"Traceback" not in terminal.transcript and b"RuntimeError" not in terminal.transcript
    finally:
        terminal.close()


def test_ctrl_c_stops_a_one_shot_query_without_a_traceback(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    pipeline.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    env = {**os.environ, "PYTHONPATH": str(Path(kwarehouse.__file__).parents[1])}
    query = ENDLESS_QUERY.decode().strip().rstrip(";")
    child = subprocess.Popen([sys.executable, "-m", "kwarehouse", "--warehouse", str(warehouse.root), "sql", query],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)                         # started, and inside the query
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert (child.returncode, out, err) == (1, "", "\nAborted!\n")
