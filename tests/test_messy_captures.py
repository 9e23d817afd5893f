"""Console captures as people save them (issue 31, part 2): every variant here is made by code from a
real capture (tests/data, and the corpus's ncu console and details text where ../shared is at hand),
and the tables kwh uses must come out exactly equal to the clean file's.

The pollutions: nsys's stderr written into the middle of a row (stdout is block-buffered when
redirected, stderr is not), `\\r` progress bars, CRLF, a BOM, ANSI colour codes, lines wrapped by an
80-column terminal, a 1.5 MB training log before the report, UTF-16LE with a BOM (PowerShell's `>`),
UTF-16LE without one, and CR-only line ends."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.cli import main
from kwarehouse.errors import InputError
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA

NSYS = DATA / "text-nsys-a100-vectoradd/stats_console.txt"        # nsys profile --stats=true, A100
NCU_CONSOLE = DATA / "text-ncu-gpt2-h100/gpt2.ncu-console.txt"     # ncu --import R
NCU_DETAILS_TEXT = DATA / "text-ncu-gpt2-h100/gpt2.details-text.txt"
NCU_STDOUT_CSV = DATA / "ncu-cupy-h100-stdout/stdout.details.csv"   # ncu --csv ... > out (stdout)
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "h100-2026-11b"
NVTX_SKIPPED = "SKIPPED: /tmp/nsys-report-a98b.sqlite does not contain NV Tools Extension (NVTX) data.\n"
PROGRESS = "[1/8] [0%                          ] vector_add.nsys-rep\r[1/8] [========================100%] vector_add.nsys-rep\n"


def _training_log(size: int) -> str:
    """What `python train.py` prints before ncu's or nsys's report: made of steps, with no report marker."""
    # the length so far is kept as it grows: summing every line's length per line made a 3 MB log take
    # ~10 CPU-s (quadratic), most of this file's time
    lines, step, length = [], 0, 0
    while length < size:
        lines.append(f"step {step:6d} | loss {2.5 / (1 + step / 500):.4f} | lr 3.00e-04 | 412.3 ms/step | "
                     f"tokens/s 79,532\n")
        length += len(lines[-1])
        step += 1
    return "".join(lines)


def _fold(text: str, width: int = 80) -> str:
    """`fold -w 80`: what a copy from an 80-column terminal keeps of lines longer than that."""
    out = []
    for line in text.split("\n"):
        out.append("\n".join(line[i:i + width] for i in range(0, max(len(line), 1), width)))
    return "\n".join(out)


def _splice_into_row(text: str, row_marker: str, message: str) -> str:
    """`message` (a whole stderr line) written into the middle of the first line holding `row_marker`."""
    at = text.index(row_marker)
    return text[:at + len(row_marker) // 2] + message + text[at + len(row_marker) // 2:]


def _colour(text: str) -> str:
    """Every third line in bold and every number in green, as a coloured terminal would leave them."""
    lines = text.split("\n")
    for i in range(0, len(lines), 3):
        lines[i] = "\x1b[1m" + re.sub(r"(\d[\d,.]*)", "\x1b[32m\\1\x1b[0m", lines[i]) + "\x1b[0m\x1b[K"
    return "\n".join(lines)


# name -> (how the variant's bytes are made from the clean text, whether a warning is expected)
POLLUTIONS = {
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    "bom": lambda t: ("\ufeff" + t).encode(),
    "cr-only": lambda t: t.replace("\n", "\r").encode(),
    "ansi": lambda t: _colour(t).encode(),
    "progress-bars": lambda t: (PROGRESS * 3 + t.replace("\n\n", "\n\n" + PROGRESS, 2)).encode(),
    "wrapped-80": lambda t: _fold(t).encode(),
    "log-before": lambda t: (_training_log(1_500_000) + t).encode(),
    "utf-16le-bom": lambda t: t.encode("utf-16"),           # little-endian with a BOM, as PowerShell writes
    "utf-16le": lambda t: t.encode("utf-16-le"),
}
NSYS_ONLY = {
    # nsys's stderr in the middle of a row of a table kwh uses, and of one it does not (osrt_sum)
    "stderr-in-kernel-row": lambda t: _splice_into_row(t, "vectorAdd(const float *, const float *", NVTX_SKIPPED).encode(),
    "stderr-in-osrt-row": lambda t: _splice_into_row(t, "pthread_create", NVTX_SKIPPED).encode(),
    "stderr-in-api-row": lambda t: _splice_into_row(t, "cudaLaunchKernel", NVTX_SKIPPED).encode(),
    "stderr-between-rows": lambda t: t.replace("cudaMalloc            \n", "cudaMalloc            \n" + NVTX_SKIPPED)
                                     .encode(),
    "progress-bar-in-row": lambda t: _splice_into_row(t, "cuModuleGetLoadingMode", PROGRESS).encode(),
    "everything": lambda t: ("\ufeff" + _splice_into_row(t, "pthread_create", NVTX_SKIPPED)
                             .replace("\n", "\r\n")).encode("utf-16-le"),
}
NCU_ONLY = {
    "prof-line-in-metric-row": lambda t: _splice_into_row(
        t, "DRAM Throughput                   %", "==PROF== Disconnected from process 464\n").encode(),
    "warning-between-rows": lambda t: t.replace("    SM Frequency", "==WARNING== Backing up device memory\n"
                                                "    SM Frequency", 3).encode(),
}


def _nsys_tables(result) -> dict[str, pl.DataFrame]:
    return {"summaries": result.summaries, "nvtx_summaries": result.nvtx_summaries, **result.tables}


def _ncu_tables(result) -> dict[str, pl.DataFrame]:
    return {"launches": result.launches, "metrics": result.metrics, "rules": result.rules}


def _assert_same(got: dict, want: dict, variant: str) -> None:
    assert got.keys() == want.keys(), variant
    for name, frame in want.items():
        assert got[name] is not None and got[name].equals(frame), (variant, name)


def _ncu_sources() -> list[Path]:
    found = [NCU_CONSOLE, NCU_DETAILS_TEXT]
    if CORPUS.is_dir():
        found += sorted(CORPUS.glob("*.tar.xz"))
    return found


@pytest.fixture(scope="module")
def corpus_texts(tmp_path_factory) -> dict[str, Path]:
    """The corpus's ncu console and details text, extracted from its tarballs (none without ../shared)."""
    import tarfile
    out: dict[str, Path] = {}
    if not CORPUS.is_dir():
        return out
    folder = tmp_path_factory.mktemp("corpus")
    for archive in sorted(CORPUS.glob("*.tar.xz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith((".ncu-console.txt", ".details-text.txt")):
                    tar.extract(member, folder, filter="data")
                    out[member.name] = folder / member.name
    return out


@pytest.mark.parametrize("variant", [*POLLUTIONS, *NSYS_ONLY])
def test_nsys_console_capture_polluted_reads_the_clean_tables(tmp_path, variant):
    clean = ingest.read(NSYS)
    text = NSYS.read_text(encoding="utf-8")
    path = tmp_path / "stats_console.txt"
    path.write_bytes({**POLLUTIONS, **NSYS_ONLY}[variant](text))
    assert ingest.sniff(path).name == "nsys-text", variant
    got = ingest.read(path)
    _assert_same(_nsys_tables(got), _nsys_tables(clean), variant)
    assert got.warnings == [], variant


@pytest.mark.parametrize("variant", [*POLLUTIONS, *NCU_ONLY])
def test_ncu_console_capture_polluted_reads_the_clean_tables(tmp_path, variant):
    text = NCU_CONSOLE.read_text(encoding="utf-8")
    clean = ingest.read(NCU_CONSOLE)
    path = tmp_path / "out.txt"
    path.write_bytes({**POLLUTIONS, **NCU_ONLY}[variant](text))
    assert ingest.sniff(path).name == "ncu-text", variant
    got = ingest.read(path)
    _assert_same(_ncu_tables(got), _ncu_tables(clean), variant)
    assert got.warnings == [], variant


@pytest.fixture(scope="module")
def corpus_clean_tables(corpus_texts) -> dict[str, dict[str, pl.DataFrame]]:
    """The tables of each corpus text as it is, read once for every pollution (half of each case's CPU)."""
    return {name: _ncu_tables(ingest.read(source)) for name, source in corpus_texts.items()}


@pytest.mark.parametrize("variant", list(POLLUTIONS))
def test_corpus_ncu_text_polluted_reads_the_clean_tables(tmp_path, corpus_texts, corpus_clean_tables, variant):
    if not corpus_texts:
        pytest.skip("the corpus (../shared) is not at hand")
    for name, source in corpus_texts.items():
        path = tmp_path / Path(name).name
        path.write_bytes(POLLUTIONS[variant](source.read_text(encoding="utf-8")))
        assert ingest.sniff(path).name == "ncu-text", (variant, name)
        got = ingest.read(path)
        _assert_same(_ncu_tables(got), corpus_clean_tables[name], f"{variant} {name}")
        assert got.warnings == [], (variant, name)


@pytest.mark.parametrize("variant", ["log-before", "utf-16le-bom", "bom", "crlf"])
def test_ncu_csv_on_stdout_polluted_reads_the_clean_tables(tmp_path, variant):
    """`ncu --csv python train.py > out.csv`: the CSV page after a training log, or in UTF-16."""
    clean = ingest.read(NCU_STDOUT_CSV)
    path = tmp_path / "out.csv"
    path.write_bytes(POLLUTIONS[variant](NCU_STDOUT_CSV.read_text(encoding="utf-8")))
    assert ingest.sniff(path).name == "ncu-details-csv", variant
    _assert_same(_ncu_tables(ingest.read(path)), _ncu_tables(clean), variant)


def test_a_log_longer_than_the_first_window_is_sniffed_to_the_report(tmp_path):
    """Sniffing used to look at the first megabyte only: the capture was skipped, exit status 0."""
    text = NSYS.read_text(encoding="utf-8")
    path = tmp_path / "train_out.txt"
    path.write_text(_training_log(ingest.SNIFF_BYTES * 3 + 12345) + text, encoding="utf-8")
    assert ingest.sniff(path).name == "nsys-text"
    # a log with no report anywhere is still not claimed, and says it is text
    log = tmp_path / "train.log"
    log.write_text(_training_log(ingest.SNIFF_BYTES * 2), encoding="utf-8")
    assert ingest.sniff(log) is None
    assert ingest.unclaimed_reason(log) == "not a profiler export (text)"
    log.write_bytes(_training_log(10_000).encode("utf-16-le"))
    assert ingest.sniff(log) is None and ingest.unclaimed_reason(log) == "not a profiler export (text)"


def test_a_row_that_cannot_be_read_is_its_warning_and_line_numbers_are_the_editors(tmp_path):
    """A message no one knows written into a kernel-summary row: that row is left out with a warning
    naming the line an editor shows (`\\r` is not a line break there), every other table is read."""
    text = PROGRESS * 5 + NSYS.read_text(encoding="utf-8")      # five lines, each with a \r inside
    lines = text.split("\n")
    row = next(i for i, line in enumerate(lines) if "cudaMemcpy  " in line)
    lines[row] = lines[row][:40] + "Traceback (most recent call last):"
    path = tmp_path / "stats_console.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    clean = ingest.read(NSYS)
    got = ingest.read(path)
    assert len(got.warnings) == 1
    assert got.warnings[0].startswith(f"{path}:{row + 1}: ")
    api = clean.tables["api_summaries"]
    assert got.tables["api_summaries"].equals(api.filter(pl.col("api_name") != "cudaMemcpy"))
    assert got.summaries.equals(clean.summaries)

    # the same in an ncu table: the row is left out, the launch and its other rows are read
    console = NCU_CONSOLE.read_text(encoding="utf-8").split("\n")
    row = next(i for i, line in enumerate(console) if line.startswith("    SM Frequency"))
    console[row] = console[row] + " Traceback (most recent call last):"
    path = tmp_path / "out.txt"
    path.write_text("\n".join(console), encoding="utf-8")
    got, clean = ingest.read(path), ingest.read(NCU_CONSOLE)
    assert [w.split(": ")[0] for w in got.warnings] == [f"{path}:{row + 1}"]
    assert got.metrics.height == clean.metrics.height - 1 and got.launches.equals(clean.launches)


def test_a_capture_with_nothing_usable_is_refused_on_one_line(tmp_path):
    lines = NSYS.read_text(encoding="utf-8").split("\n")
    kernel = next(i for i, line in enumerate(lines) if "vectorAdd(const" in line)
    keep = [line for i, line in enumerate(lines) if "Executing" in line or not line.startswith(" ") or i == kernel]
    keep[keep.index(lines[kernel])] = lines[kernel][:30]
    keep.append("done.")
    path = tmp_path / "stats_console.txt"
    path.write_text("\n".join(keep) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        ingest.read(path, format="nsys-text")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"{path}:{kernel + 1}: ") or str(path) in str(caught.value)


def test_ingest_counts_and_prints_the_warnings(tmp_path):
    """The ingest report carries each run's row warnings; the CLI prints them and counts them."""
    folder = tmp_path / "captures"
    folder.mkdir()
    text = NSYS.read_text(encoding="utf-8").replace("cudaMalloc            \n",
                                                    "cudaMalloc            \nsome program output on stderr\n")
    (folder / "stats_console.txt").write_text(text, encoding="utf-8")
    shutil.copy(NCU_STDOUT_CSV, folder / "clean.details.csv")
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert report.ok and len(report.runs) == 2
    warned = [w for run in report.runs for w in run.warnings]
    assert len(warned) == 1 and "stats_console.txt:" in warned[0]
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh2"), "ingest", str(folder)])
    assert result.exit_code == 0, result.output
    assert "1 row(s) left out with a warning" in result.output


# -- issue 31, part 7 ------------------------------------------------------------------------------

def test_torch_trace_memory_operations_are_named_whole():
    """"Memcpy DtoH (Device -> Pinned)": the "->" is no template bracket; the identity was `Pinned)`."""
    from kwarehouse.normalize import identity
    for name, signature in (("Memcpy DtoH (Device -> Pinned)", "[CUDA memcpy Device-to-Host]"),
                            ("Memcpy HtoD (Pageable -> Device)", "[CUDA memcpy Host-to-Device]"),
                            ("Memcpy DtoD (Device -> Device)", "[CUDA memcpy Device-to-Device]"),
                            ("Memset (Device)", "[CUDA memset]")):
        found = identity.identify(name)
        assert (found.kernel_name, found.kernel_base, found.kernel_signature) == (name, signature, signature)


def test_torch_trace_memcpy_events_are_stored_under_their_whole_name(tmp_path):
    """A real trace's Memset event, copied by code as the memory copies other traces hold."""
    import json
    trace = json.loads((DATA / "torch-trace-gpt2/trace.json").read_text(encoding="utf-8"))
    memset = next(e for e in trace["traceEvents"] if e.get("name") == "Memset (Device)")
    for kinds in ("DtoH (Device -> Pinned)", "HtoD (Pageable -> Device)"):
        trace["traceEvents"].append({**memset, "name": f"Memcpy {kinds}", "cat": "gpu_memcpy",
                                     "ts": memset["ts"] + 1})
    folder = tmp_path / "trace"
    folder.mkdir()
    (folder / "trace.json").write_text(json.dumps(trace), encoding="utf-8")
    shutil.copy(DATA / "torch-trace-gpt2/manifest.torchprof.json", folder)
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest([folder], warehouse).ok
    from conftest import rows
    names = rows(warehouse, "SELECT DISTINCT kernel_base FROM kernel_launches WHERE activity = 'memcpy' ORDER BY 1")
    assert names == [("[CUDA memcpy Device-to-Host]",), ("[CUDA memcpy Host-to-Device]",)]


@pytest.mark.parametrize("placeholder_name", ["same", "null"])
def test_nsys_gpu_placeholder_row_is_skipped(tmp_path, placeholder_name):
    """nsys 2021.5 writes a placeholder GPU row (compute capability 0.0, no SMs) before the A100's:
    made by code from the real A100 export, whose one row is moved behind such a placeholder."""
    import sqlite3
    clean = DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite"
    path = tmp_path / "saxpy.sqlite"
    shutil.copy(clean, path)
    with sqlite3.connect(path) as con:
        columns = [row[1] for row in con.execute("PRAGMA table_info(TARGET_INFO_GPU)")]
        (real,) = con.execute("SELECT * FROM TARGET_INFO_GPU").fetchall()
        con.execute("DELETE FROM TARGET_INFO_GPU")
        placeholder = dict(zip(columns, real), id=0, smCount=0, computeMajor=0, computeMinor=0)
        if placeholder_name == "null":
            placeholder["name"] = None
        rows_ = [placeholder, dict(zip(columns, real), id=1)]
        for row in rows_:
            con.execute(f"INSERT INTO TARGET_INFO_GPU ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        [row[c] for c in columns])
    want = ingest.read(clean).run_info      # the GPU's, and the capture's day (run_date)
    assert {k: want[k] for k in ("sm_count", "compute_capability")} == {"sm_count": 108, "compute_capability": "8.0"}
    assert ingest.read(path).run_info == want
