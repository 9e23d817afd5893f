"""Inputs and warehouses at their edges (issue 32, item 5): nsys console text with thousands of cut
("…") kernel names or one giant name, writes that would follow a symlink out of the warehouse, and
one warehouse opened under several paths (a symlink, a relative path, "..").

The captures are derived by code from the real vLLM capture (tests/data/text-nsys-vllm-truncated:
nsys stats 2025.5.2, names cut to 100 characters with "…"): its kernel table's header, dash line and
first row are kept as printed, only the Name cells and the number of rows change."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kwarehouse
from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError, KwhError
from kwarehouse.ingest import captured_text, nsys_stats_csv, nsys_text
from kwarehouse.store import lock
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA

VLLM = DATA / "text-nsys-vllm-truncated/stats_column.txt"
NCU = DATA / "ncu-gpt2-h100/gpt2.raw.csv"
CUT = "\u2026"
SRC = Path(kwarehouse.__file__).parents[1]          # the kwh under test, for child processes


# -- captures derived from the real one ------------------------------------------------------------

def _kernel_table() -> tuple[list[str], list[str], str, int]:
    """(the lines before the kernel table's first row, the lines after its rows, that first row, where
    its Name column starts) of the real vLLM capture."""
    lines = VLLM.read_text(encoding="utf-8").splitlines()
    dashes = next(i for i, line in enumerate(lines) if line.lstrip().startswith("--------") and "Name" in lines[i - 1])
    end = next(i for i in range(dashes + 1, len(lines)) if not lines[i].strip())
    name_start = lines[dashes].rstrip().rfind(" ") + 1
    return lines[:dashes + 1], lines[end:], lines[dashes + 1], name_start


def full_names(count: int) -> list[str]:
    """`count` distinct kernel names longer than nsys's 100-character column, each made from the
    capture's own (cut) Marlin name with a number inside its first 99 characters, so that each cut
    copy starts exactly one of them."""
    _, _, row, start = _kernel_table()
    cut = row[start:].removesuffix(CUT)          # "void marlin::Marlin<(long)1125899906910725, ..., (long)1"
    first = cut.index(", ")
    head, tail = cut[:first], cut[first:]
    return [f"{head}, (long){number}{tail}{number}>(int)" for number in range(count)]


def giant_name(size: int) -> str:
    """A kernel name of about `size` characters: the capture's Marlin name with its template
    arguments repeated (what a runaway template instantiation prints)."""
    _, _, row, start = _kernel_table()
    cut = row[start:].removesuffix(CUT)
    first = cut.index(", ")
    argument = cut[first:cut.index(", ", first + 2)]
    return cut[:first] + argument * (size // len(argument)) + ">(int)"


def capture(names: list[list[str]]) -> str:
    """The vLLM capture's kernel report once per list of names: each a copy of its header, dash line and
    first row with the Name cell replaced, the rest of the capture after the last one."""
    before, after, row, start = _kernel_table()
    parts = []
    for table in names:
        parts += before + [row[:start] + name for name in table]
    return "\n".join(parts + after) + "\n"


def cut_copy(name: str) -> str:
    """The name as nsys 2024+ prints it in a column table: 99 characters and "…"."""
    return name[:99] + CUT


def write_cut_capture(path: Path, count: int) -> list[str]:
    """A capture of `count` kernels printed whole in one kernel table and cut in the next (the
    report printed twice, as `nsys stats` over two reports of one program does)."""
    names = full_names(count)
    path.write_text(capture([names, [cut_copy(n) for n in names]]), encoding="utf-8")
    return names


def _timed_read(path: Path) -> tuple[float, object]:
    started = time.perf_counter()
    result = ingest.read(path)
    return time.perf_counter() - started, result


# -- nsys-text: cut names completed in n log n -----------------------------------------------------

@pytest.mark.parametrize("count, seconds", [
    pytest.param(16_000, 20, id="16000"),                                # 59 s before the fix, ~1.3 s after
    pytest.param(64_000, 60, id="64000", marks=pytest.mark.slow),      # ~20 min before, ~4 s after
])
def test_thousands_of_cut_names_are_completed_in_n_log_n(tmp_path, count, seconds):
    path = tmp_path / "stats_column.txt"
    names = write_cut_capture(path, count)
    took, result = _timed_read(path)
    read = result.summaries["kernel_name"].to_list()
    assert read == names + names            # every cut copy completed to the one name it starts
    assert took < seconds, f"{count} cut names took {took:.1f} s"


def test_cut_names_of_many_full_names_are_completed_only_where_one_starts_them(tmp_path):
    """Among thousands of full names: a cut text that several start (a name and its longer variant),
    or none, stays as printed; the others are completed."""
    names = full_names(3_000)
    twin = names[7][:99] + "_variant"                   # a second full name starting as names[7] is cut
    stranger = names[8][:50] + "X" * 49 + CUT           # starts no full name
    path = tmp_path / "stats_column.txt"
    path.write_text(capture([[*names, twin], [*(cut_copy(n) for n in names), stranger]]), encoding="utf-8")
    read = ingest.read(path).summaries["kernel_name"].to_list()
    completed = read[len(names) + 1:]
    assert completed[7] == cut_copy(names[7])           # two full names start it: kept, "…" included
    assert completed[-1] == stranger
    assert [n for i, n in enumerate(completed[:-1]) if i != 7] == [n for i, n in enumerate(names) if i != 7]


def test_a_run_of_lines_of_the_widest_length_is_unwrapped_in_linear_time():
    """A terminal-wrapping reading joins each line of the widest length to the next: 40,000 such lines
    (nsys prints every cut row at one width) are one join (0.01 s), not 40,000 copies of a growing
    line (195 s before the fix on this 2-core machine)."""
    lines = ["x" * 120] * 40_000 + ["tail"]
    started = time.perf_counter()
    joined = captured_text.unwrapped(captured_text.Captured(lines, range(1, len(lines) + 1), True))
    assert time.perf_counter() - started < 3
    assert joined.lines == ["x" * 120 * 40_000 + "tail"] and list(joined.numbers) == [1]


# -- nsys-text: a giant line refused in bounded memory ---------------------------------------------

def test_a_giant_kernel_name_is_refused_without_reading_the_file_whole(tmp_path, monkeypatch):
    """The default version: the limit lowered to 2 MB, a 6 MB name; the file is never read whole."""
    path = tmp_path / "stats_column.txt"
    path.write_text(capture([[full_names(1)[0], giant_name(6 << 20)]]), encoding="utf-8")
    monkeypatch.setattr(nsys_text, "MAX_LINE_BYTES", 2 << 20)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} read whole"))
    monkeypatch.setattr(Path, "read_text", lambda self, **kw: pytest.fail(f"{self} read whole"))
    with pytest.raises(InputError) as refused:
        ingest.read(path)
    message = str(refused.value)
    assert message == (f"{path}:8: a 6 MB line; no nsys output has lines like it (corrupt file, or not nsys "
                       "console text): re-capture it, or pass the report's .sqlite export")
    assert "\n" not in message


@pytest.mark.parametrize("encoding, newline", [("utf-16", "\n"), ("utf-8", "\r")], ids=["utf16", "cr-only"])
def test_a_giant_line_of_a_utf16_or_cr_only_capture_is_found_and_numbered(tmp_path, monkeypatch, encoding, newline):
    text = capture([[full_names(1)[0], giant_name(3 << 20)]])
    path = tmp_path / "stats_column.txt"
    path.write_bytes(text.replace("\n", newline).encode(encoding))
    monkeypatch.setattr(nsys_text, "MAX_LINE_BYTES", 2 << 20)
    with pytest.raises(InputError, match=r"stats_column.txt:8: a 3 MB line; "):
        ingest.read(path)


def test_a_giant_line_inside_one_read_chunk_is_found_and_numbered(tmp_path, monkeypatch):
    """A limit below the scan's chunk size: the long line lies between two line ends of one chunk."""
    path = tmp_path / "stats_column.txt"
    path.write_text(capture([[*full_names(500), giant_name(300_000)]]), encoding="utf-8")
    monkeypatch.setattr(nsys_text, "MAX_LINE_BYTES", 100_000)
    with pytest.raises(InputError, match=r"stats_column.txt:507: a 293 KB line; "):
        ingest.read(path)


def test_a_giant_field_of_an_nsys_stats_csv_is_refused_without_reading_the_file_whole(tmp_path, monkeypatch):
    """nsys stats CSV shares the check: a real kernel summary with one name made 3 MB long (limit 2 MB)."""
    real = (DATA / "nsys-stats-rtx5090" / "summary_cuda_gpu_kern_sum.csv").read_text(encoding="utf-8").splitlines()
    first = real[1].split(",")
    giant = ",".join(first[:8]) + ',"' + giant_name(3 << 20) + '"'
    path = tmp_path / "summary_cuda_gpu_kern_sum.csv"
    path.write_text("\n".join([real[0], real[2], giant, *real[3:]]) + "\n", encoding="utf-8")
    monkeypatch.setattr(nsys_stats_csv, "MAX_LINE_BYTES", 2 << 20)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} read whole"))
    monkeypatch.setattr(Path, "read_text", lambda self, **kw: pytest.fail(f"{self} read whole"))
    with pytest.raises(InputError) as refused:
        ingest.read(path, format="nsys-stats-csv")
    assert str(refused.value).startswith(f"{path}:3: a 3 MB line; no nsys output has lines like it (corrupt file, "
                                         "or not nsys stats CSV output)")


def test_lines_below_the_limit_still_read(tmp_path, monkeypatch):
    """A capture larger than the limit whose lines are all shorter reads as before (the scan passes)."""
    path = tmp_path / "stats_column.txt"
    names = write_cut_capture(path, 2_000)
    monkeypatch.setattr(nsys_text, "MAX_LINE_BYTES", path.stat().st_size // 3)
    assert ingest.read(path).summaries["kernel_name"].to_list() == names + names


def _peak_of_child(code: str) -> tuple[subprocess.CompletedProcess, float]:
    """Run `code` in a fresh Python; (its result, its peak RSS in MB). The peak is VmHWM, the high
    water mark of the new program's own memory: getrusage's ru_maxrss would count the memory of the
    pytest process it was forked from (Linux keeps it across exec)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    script = (f"{code}\nfrom pathlib import Path as _Path\n"
              "print('peak', next(l.split()[1] for l in _Path('/proc/self/status').read_text().splitlines() "
              "if l.startswith('VmHWM:')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    peak = [line for line in done.stdout.splitlines() if line.startswith("peak ")]
    return done, (int(peak[-1].split()[1]) / 1024 if peak else float("inf"))


@pytest.mark.slow
def test_a_100_mb_kernel_name_is_refused_in_bounded_memory(tmp_path):
    """The finding as found: a 100 MB name went in at 2.1 GB RSS (kwh ingest); now a one-line refusal,
    measured in a fresh process (the import of kwh and polars is most of it)."""
    path = tmp_path / "stats_column.txt"
    path.write_text(capture([[full_names(1)[0], giant_name(100 << 20)]]), encoding="utf-8")
    done, peak = _peak_of_child(
        "from pathlib import Path\nfrom kwarehouse import ingest\nfrom kwarehouse.errors import InputError\n"
        f"try:\n    ingest.read(Path({str(path)!r}))\nexcept InputError as exc:\n    print('refused', exc)\n")
    assert f"refused {path}:8: a 100 MB line; no nsys stats output has lines like it" in done.stdout, done.stderr
    assert peak < 400, f"peak RSS {peak:.0f} MB"


# -- one canonical path per warehouse --------------------------------------------------------------

GPT2 = DATA / "ncu-gpt2-h100"


def _published(root: Path) -> tuple[int, str]:
    """(mtime_ns, sha256) of the warehouse's published file."""
    path = root / "warehouse.duckdb"
    return path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


def _kwh(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "kwarehouse", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture
def ingested(tmp_path) -> Path:
    """A warehouse of the real gpt2 ncu export at tmp_path/real/wh (its real path)."""
    root = tmp_path / "real" / "wh"
    assert ingest_job.ingest([GPT2], Warehouse(root)).failed == []
    return root


def test_reads_through_other_paths_never_rewrite_the_published_file(tmp_path, ingested):
    """A symlink to the warehouse, a relative path and one with "..", in turn with the real path:
    each read answers the same and leaves warehouse.duckdb as it was (it was rebuilt, "built for
    another folder", on every read that came by another path than the last)."""
    (tmp_path / "link").symlink_to(ingested)
    (tmp_path / "elsewhere").mkdir()
    before = _published(ingested)
    count = [(3,)]
    paths = [tmp_path / "link", ingested, Path("real/wh"), tmp_path / "elsewhere" / ".." / "link", ingested]
    for path in paths:
        warehouse = Warehouse(path if path.is_absolute() else tmp_path / path)
        con = warehouse.connect()
        try:
            assert con.execute("SELECT count(*) FROM kernels").fetchall() == count, path
        finally:
            con.close()
        assert warehouse.root == ingested
        assert _published(ingested) == before, f"read through {path} rewrote warehouse.duckdb"
    for path in ("link", "real/wh", "elsewhere/../link"):
        done = _kwh(tmp_path, "-w", path, "sql", "SELECT count(*) AS n FROM kernels", "--csv")
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "3", done.stderr
        assert _published(ingested) == before, f"kwh -w {path} sql rewrote warehouse.duckdb"


def test_a_warehouse_opened_through_a_symlink_names_its_real_path(tmp_path, ingested):
    """The published file's views read the Parquet files under the real path, whichever path the
    writer was given: a DuckDB session opening it finds them even after the link is gone."""
    (tmp_path / "link").symlink_to(ingested)
    assert ingest_job.ingest([DATA / "ncu-gtx1080-raw"], Warehouse(tmp_path / "link")).failed == []
    (tmp_path / "link").unlink()
    import duckdb
    con = duckdb.connect(str(ingested / "warehouse.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(DISTINCT model) FROM kernels").fetchall() == [(2,)]
        sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'kernels'").fetchall()[0][0]
    finally:
        con.close()
    assert str(tmp_path / "link") not in sql


# -- writes never follow a symlink out of the warehouse --------------------------------------------

OTHER = DATA / "ncu-gtx1080-raw"
FILES_KERNELS = "_files/kernels"


def _files_under(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def _linked_away(root: Path, relative: str, target: Path) -> Path:
    """Move the warehouse's folder `relative` to `target` and leave a symlink in its place."""
    folder = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(folder, target) if folder.exists() else target.mkdir()
    folder.symlink_to(target, target_is_directory=True)
    return folder


def _kernel_models(root: Path) -> list[tuple]:
    con = Warehouse(root).connect()
    try:
        return con.execute("SELECT model, count(*) FROM kernels GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("relative", ["kernels", "kernels/model=gpt2", "_files/kernels", "_files", "_staging",
                                      "_quarantine", "metrics/model=gpt2/gpu=NVIDIA H100 80GB HBM3"])
def test_a_folder_kwh_writes_into_linked_out_of_the_warehouse_is_refused(tmp_path, ingested, relative):
    outside = tmp_path / "outside" / "moved"
    link = _linked_away(ingested, relative, outside)
    kept = _files_under(outside)
    models = _kernel_models(ingested)                  # reading through the link works
    with pytest.raises(KwhError) as refused:
        ingest_job.ingest([OTHER], Warehouse(ingested))
    message = str(refused.value)
    assert message.startswith(f"{link}: a symbolic link (to {outside}); kwh writes only into the warehouse's own "
                              "folders: replace the link by what it points to") and "\n" not in message
    assert _files_under(outside) == kept                 # nothing written, nothing deleted there
    assert _kernel_models(ingested) == models == [("gpt2", 3)]


def test_a_table_folder_linked_inside_the_warehouse_is_refused_too(tmp_path, ingested):
    """A link that stays inside aliases kwh's folders: kernels/ -> _files/kernels/ would make taking a
    replaced file out of its table folder delete the committed file."""
    (ingested / "kernels").rename(ingested / "kernels.tree")
    shutil.rmtree(ingested / "kernels.tree")             # the table folder's files are the _files/ links' twins
    (ingested / "kernels").symlink_to(ingested / FILES_KERNELS)
    before = _files_under(ingested / FILES_KERNELS)
    with pytest.raises(KwhError, match=r"kernels: a symbolic link \(to .*_files/kernels\); "):
        ingest_job.ingest([OTHER], Warehouse(ingested))
    assert _files_under(ingested / FILES_KERNELS) == before


def test_a_reader_never_rebuilds_the_published_file_through_a_linked_staging_folder(tmp_path, ingested):
    """A stale warehouse.duckdb is rebuilt by a free reader, in _staging/: linked away, the reader
    answers from the catalog and writes nothing there."""
    outside = tmp_path / "outside" / "staging"
    _linked_away(ingested, "_staging", outside)
    (ingested / "warehouse.duckdb").unlink()
    assert _kernel_models(ingested) == [("gpt2", 3)]
    assert _files_under(outside) == {} and not (ingested / "warehouse.duckdb").exists()


def test_a_real_warehouse_has_no_links(ingested):
    assert lock.links(Warehouse(ingested).root) == []
