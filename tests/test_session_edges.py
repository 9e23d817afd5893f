"""The edges of a session (issue 31, part 6): Ctrl-C in the `kwh sql` prompt, archives in an ingested
folder, and captures that legitimately hold no CUDA data."""

from __future__ import annotations

import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA

import kwarehouse
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.build import sources
from kwarehouse.store.warehouse import Warehouse

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
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
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
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
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


# -- archives in an ingested folder ----------------------------------------------------------------

def _archives(folder: Path) -> dict[str, str]:
    """Archives and compressed copies of real exports, made by code, by name -> the start of the
    skip reason each must get."""
    import bz2
    import io
    import lzma
    import tarfile
    import zipfile

    import pyarrow as pa
    export = DATA / "ncu-gpt2-h100"
    raw = (export / "gpt2.raw.csv").read_bytes()
    for name, mode in (("gpt2.tar.gz", "w:gz"), ("gpt2.tgz", "w:gz"), ("gpt2.tar.xz", "w:xz"),
                       ("gpt2.tar.bz2", "w:bz2"), ("gpt2.tar", "w")):
        with tarfile.open(folder / name, mode) as tar:
            tar.add(export, arcname="gpt2")
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w") as tar:
        tar.add(export, arcname="gpt2")
    (folder / "gpt2.tar.zst").write_bytes(pa.compress(tarred.getvalue(), "zstd", asbytes=True))
    with zipfile.ZipFile(folder / "gpt2.zip", "w") as archive:
        for file in sorted(export.iterdir()):
            archive.write(file, f"gpt2/{file.name}")
    (folder / "single.raw.csv.xz").write_bytes(lzma.compress(raw))
    (folder / "single.raw.csv.bz2").write_bytes(bz2.compress(raw))
    return {
        "gpt2.tar.gz": f"a gzip-compressed tar archive; kwh does not read inside archives: extract it "
                       f"(mkdir -p {folder}/gpt2 && tar xzf {folder}/gpt2.tar.gz -C {folder}/gpt2) and ingest {folder}/gpt2",
        "gpt2.tgz": f"a gzip-compressed tar archive; kwh does not read inside archives: extract it "
                    f"(mkdir -p {folder}/gpt2 && tar xzf {folder}/gpt2.tgz -C {folder}/gpt2)",
        "gpt2.tar.xz": f"an xz-compressed tar archive; kwh does not read inside archives: extract it "
                       f"(mkdir -p {folder}/gpt2 && tar xJf {folder}/gpt2.tar.xz -C {folder}/gpt2)",
        "gpt2.tar.bz2": "a bzip2-compressed tar archive; kwh does not read inside archives: extract it (mkdir -p ",
        "gpt2.tar": f"a tar archive; kwh does not read inside archives: extract it (mkdir -p {folder}/gpt2 && "
                    f"tar xf {folder}/gpt2.tar -C {folder}/gpt2)",
        "gpt2.tar.zst": "a zstd-compressed tar archive; kwh does not read inside archives: extract it (mkdir -p ",
        "gpt2.zip": f"a zip archive; kwh does not read inside archives: extract it (unzip {folder}/gpt2.zip -d "
                    f"{folder}/gpt2) and ingest {folder}/gpt2",
        "single.raw.csv.xz": f"an xz-compressed file; kwh reads gzip-compressed exports, not xz: decompress it "
                             f"(xz -dk {folder}/single.raw.csv.xz) and ingest {folder}/single.raw.csv",
        "single.raw.csv.bz2": "a bzip2-compressed file; kwh reads gzip-compressed exports, not bzip2: decompress it "
                              f"(bzip2 -dk {folder}/single.raw.csv.bz2) and ingest {folder}/single.raw.csv",
    }


def test_archives_are_named_skips_with_the_command_that_extracts_them(tmp_path):
    from click.testing import CliRunner

    from kwarehouse.cli import main
    drop = tmp_path / "drop"
    drop.mkdir()
    expected = _archives(drop)
    (drop / "clean").mkdir()
    for name in ("gpt2.raw.csv", "manifest.ncu.json", "ncu_version.txt"):
        (drop / "clean" / name).write_bytes((DATA / "ncu-gpt2-h100" / name).read_bytes())
    warehouse = tmp_path / "wh"
    result = CliRunner().invoke(main, ["--warehouse", str(warehouse), "ingest", str(drop)])
    assert result.exit_code == 0, result.output
    skipped = {line.split(": ", 1)[0].removeprefix(f"skipped {drop}/"): line.split(": ", 1)[1]
               for line in result.output.splitlines() if line.startswith("skipped ")}
    assert set(skipped) == set(expected), result.output
    for name, reason in expected.items():
        assert skipped[name].startswith(reason), (name, skipped[name])
    assert result.output.splitlines()[-1] == (f"ingested 1 run(s), 3 kernels; 0 already ingested, "
                                              f"{len(expected)} other file(s) ignored, 0 failed")
    # the command in the message does what it says: then the export inside goes in
    command = skipped["gpt2.tar.xz"].split("extract it (", 1)[1].split(") and ingest ", 1)[0]
    subprocess.run(command, shell=True, check=True)
    report = ingest_job.ingest([drop / "gpt2"], Warehouse(warehouse))
    assert report.failed == [] and [r.kernels for r in report.runs] == [3]


def test_an_archive_named_on_the_command_line_is_an_error_and_no_reader_is_forced_on_it(tmp_path):
    expected = _archives(tmp_path)
    warehouse = Warehouse(tmp_path / "wh")
    for name in ("gpt2.tgz", "single.raw.csv.xz"):
        for format in (None, "ncu-raw-csv"):
            report = ingest_job.ingest([tmp_path / name], warehouse, format=format)
            assert report.runs == [] and len(report.failed) == 1
            assert report.failed[0].startswith(f"{tmp_path / name}: {expected[name]}")


# -- captures with nothing to store ----------------------------------------------------------------

NCU_NOTHING_LOG = DATA / "profile-h100/custom_nothing/logs/ncu.log"   # a real ncu run that profiled nothing


def _empty_captures(folder: Path) -> dict[str, str]:
    """Captures of runs with no CUDA data, each a real file or derived from one by code: name -> the
    start of its reason."""
    import gzip
    import json
    import sqlite3
    folder.mkdir(parents=True)
    shutil.copy(DATA / "bad/nsys_no_cuda.sqlite", folder)             # nsys DDL without CUDA tables
    shutil.copy(DATA / "bad/nsys_stats_no_kernel_data.txt", folder)   # nsys stats: "does not contain CUDA kernel data"
    # an nsys export of the A100 saxpy run with every CUDA activity row deleted
    shutil.copy(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", folder / "emptied.sqlite")
    with sqlite3.connect(folder / "emptied.sqlite") as con:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            con.execute(f"DELETE FROM {table}")
    con.close()
    # the custom_cupy trace without its GPU events: what ProfilerActivity.CPU alone records
    trace = json.loads((DATA / "torch-trace-custom_cupy/trace.json").read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    (folder / "cpu_only.json").write_text(json.dumps(trace))
    (folder / "cpu_only.json.gz").write_bytes(gzip.compress(json.dumps({**trace, "copy": 2}).encode()))
    # ncu's own output when it profiled nothing, saved as `ncu --csv python app.py > out.csv` would
    shutil.copy(NCU_NOTHING_LOG, folder / "out.csv")
    return {
        "nsys_no_cuda.sqlite": "no CUDA kernel activity in this nsys export (no CUPTI_ACTIVITY_KIND_KERNEL table)",
        "nsys_stats_no_kernel_data.txt": "this nsys report has no CUDA kernel data",
        "emptied.sqlite": "no CUDA activity in this nsys-sqlite export (no kernel, memory copy or memset row",
        "cpu_only.json": "no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace",
        "cpu_only.json.gz": "no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace",
        "out.csv:4": 'ncu profiled no kernel ("==WARNING== No kernels were profiled."); if kernels were expected',
    }


def test_captures_with_nothing_to_store_are_recorded_once_and_never_fail_an_ingest(tmp_path):
    from click.testing import CliRunner

    from kwarehouse.cli import main
    drop = tmp_path / "drop"
    expected = _empty_captures(drop / "empty")
    (drop / "clean").mkdir()
    for name in ("gpt2.raw.csv", "manifest.ncu.json", "ncu_version.txt"):
        (drop / "clean" / name).write_bytes((DATA / "ncu-gpt2-h100" / name).read_bytes())
    invoke = lambda *args: CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), *args])
    first = invoke("ingest", str(drop))
    assert first.exit_code == 0, first.output
    said = {line.split(": ", 1)[0].removeprefix(f"nothing to store in {drop}/empty/"): line.split(": ", 1)[1]
            for line in first.output.splitlines() if line.startswith("nothing to store in ")}
    assert set(said) == set(expected), first.output
    for name, reason in expected.items():
        assert said[name].startswith(reason) and said[name].endswith(" (recorded; later ingests skip it)"), said[name]
    assert first.output.splitlines()[-1] == ("ingested 1 run(s), 3 kernels; 0 already ingested, 0 other file(s) "
                                             "ignored, 0 failed; 6 with nothing to store")
    # recorded in the catalog, with format, path and reason
    warehouse = Warehouse(tmp_path / "wh")
    recorded = warehouse.empty_captures()
    assert sorted(recorded.values()) == sorted(said[name].removesuffix(" (recorded; later ingests skip it)")
                                               for name in expected)
    # not read again: a later ingest skips each one, as already ingested
    again = invoke("ingest", str(drop))
    assert again.exit_code == 0, again.output
    skipped = [line for line in again.output.splitlines() if "(nothing to store: " in line]
    assert len(skipped) == len(expected) and all(line.startswith(f"skipped {drop}/empty/") for line in skipped)
    assert again.output.splitlines()[-1] == "ingested 0 run(s), 0 kernels; 7 already ingested, 0 other file(s) ignored, 0 failed"
    # a copy elsewhere (same content) is known too; nothing was stored for any of them
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    (copy / "trace.json").write_bytes((drop / "empty/cpu_only.json").read_bytes())
    report = ingest_job.ingest([copy], warehouse)
    assert report.empty == [] and report.skipped == [(str(copy / "trace.json"), "already ingested (nothing to store: "
                                                      + recorded[sources.sha256_of(copy / "trace.json")] + ")")]
    assert [r for r, in _rows(warehouse, "SELECT model FROM runs")] == ["gpt2"]


def _rows(warehouse: Warehouse, sql: str) -> list[tuple]:
    con = warehouse.connect()
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_nightly_passes_when_the_only_bad_files_are_captures_with_nothing_to_store(tmp_path):
    from click.testing import CliRunner

    from kwarehouse.cli import main
    drop = tmp_path / "drop"
    _empty_captures(drop / "empty")
    (drop / "trace").mkdir()
    for name in ("trace.json", "manifest.torchprof.json"):
        (drop / "trace" / name).write_bytes((DATA / "torch-trace-custom_cupy" / name).read_bytes())
    for night in ("first", "second"):
        result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "nightly", "--settle", "0", str(drop)])
        assert result.exit_code == 0, (night, result.output)
        assert "Error" not in result.output
    assert result.output.splitlines()[-1] == ("nightly ok: ingested 0 run(s), 0 kernels, 0 file(s) failed; "
                                              "rolled up 0 day(s); compacted 0 partition(s)")


def test_ncu_saying_it_profiled_nothing_is_found_after_a_long_program_log_and_in_utf16(tmp_path):
    log = NCU_NOTHING_LOG.read_text()
    program_line = log.splitlines()[1] + "\n"          # the workload's own output line
    filler = program_line * (1_600_000 // len(program_line))   # > 1 MB of program output before ncu's lines
    captures = tmp_path / "captures"
    captures.mkdir()
    (captures / "long.txt").write_text(filler + log)
    (captures / "powershell.txt").write_bytes("\ufeff".encode("utf-16-le") + log.encode("utf-16-le"))
    (captures / "other.txt").write_text(filler)       # the program's output alone: skipped as before
    report = ingest_job.ingest([captures], Warehouse(tmp_path / "wh"))
    assert report.failed == [] and report.runs == []
    lines = filler.count("\n") + 4
    assert sorted(e.path.rsplit("/", 1)[-1] for e in report.empty) == [f"long.txt:{lines}", "powershell.txt"]
    assert {e.format for e in report.empty} == {"ncu-log"}
    assert [path for path, _ in report.skipped] == [str(captures / "other.txt")]


def test_captures_with_nothing_to_store_in_parallel_ingests(tmp_path):
    from kwarehouse.jobs import fanout
    drop = tmp_path / "drop"
    expected = _empty_captures(drop / "a")
    _empty_captures(drop / "b")     # the same contents in a second folder: recorded once
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([drop], warehouse, fan_out=fanout.process_pool(2))
    assert report.failed == []
    assert sorted(e.path.removeprefix(f"{drop}/a/") for e in report.empty) == sorted(expected)
    assert sorted(p.removeprefix(f"{drop}/b/") for p, why in report.skipped
                  if why == "same content as another file in this ingest") == sorted(n.split(":")[0] for n in expected)
    assert len(warehouse.empty_captures()) == len(expected)
    again = ingest_job.ingest([drop], warehouse, fan_out=fanout.process_pool(2))
    assert again.empty == [] and again.failed == []
    assert sum(why.startswith("already ingested (nothing to store: ") for _, why in again.skipped) == 2 * len(expected)


SEVEN_ZIP = next((shutil.which(name) for name in ("7z", "7zz", "7za") if shutil.which(name)), None)


@pytest.mark.skipif(SEVEN_ZIP is None, reason="no 7-Zip program (Debian: apt-get install 7zip)")
def test_a_7z_archive_is_a_named_skip(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    subprocess.run([SEVEN_ZIP, "a", "-bd", str(drop / "gpt2.7z"), str(DATA / "ncu-gpt2-h100")], check=True,
                   capture_output=True)
    report = ingest_job.ingest([drop], Warehouse(tmp_path / "wh"))
    assert report.failed == [] and report.runs == []
    assert report.skipped == [(str(drop / "gpt2.7z"), f"a 7-Zip archive; kwh does not read inside archives: extract it "
                                                      f"(7z x {drop}/gpt2.7z -o{drop}/gpt2) and ingest {drop}/gpt2")]
