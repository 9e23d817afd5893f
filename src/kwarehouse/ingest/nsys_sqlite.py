"""Nsight Systems SQLite export (`nsys export --type sqlite`): the GPU timeline with NVTX context.

Tables and columns differ between nsys versions and tables are created lazily (a report without CUDA
activity has no CUPTI_ACTIVITY_KIND_KERNEL), so every table and column is looked up before use.
Kernels come from CUPTI_ACTIVITY_KIND_KERNEL with names resolved through StringIds (demangledName,
shortName and, where the column exists, mangledName); memcpy and memset activity where recorded.
Each activity's GPU is its deviceId mapped through TARGET_INFO_CUDA_DEVICE (per process) or
TARGET_INFO_GPU.cuDevice; the export's version comes from EXPORT_META_DATA (older) or
META_DATA_EXPORT. NVTX push/pop and start/end ranges (NVTX_EVENTS) are attributed to a kernel when
they enclose the CUDA API call that launched it (CUPTI_ACTIVITY_KIND_RUNTIME, same correlationId and
process, same thread) - the rule nsys's own nvtx_kern_sum report uses.

A table nsys had no rows for may be absent (2025.5 writes NVTX_EVENTS only when the program used
NVTX; 2022.2 wrote every table, empty or not): its absence alone is no damage. Where other tables
show that rows are missing - kernels but no TARGET_INFO_GPU to name their GPU, NVTX ranges but no
CUDA API calls to attribute them through, cudaMemcpy calls but no memcpy activity - the read says
so in a warning (ReadResult.warnings) and stores what is there.

The database is opened read-only and immutable: nothing (journal, lock, index) is written beside it.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError, NothingToStore
from kwarehouse.ingest import base, cells
from kwarehouse.ingest.base import TIMELINE_COLUMNS, ReadResult
from kwarehouse.normalize import nvtx

MAGIC = b"SQLite format 3\x00"
NSYS_MARKERS = ("META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "StringIds")
# NVTX_EVENTS.eventType values (nsys ENUM_NSYS_EVENT_TYPE): push/pop and start/end ranges, domain names.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
NVTX_DOMAIN_CREATE = 75
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
PID_MASK = 0xFFFFFFFFFF000000   # globalTid -> its process's globalPid
ACTIVITIES = ("kernel", "memcpy", "memset")   # by the table an activity comes from, as in ACTIVITY_TABLES
COPY_KINDS = {1: "Host-to-Device", 2: "Device-to-Host", 8: "Device-to-Device", 10: "Peer-to-Peer",
              9: "Host-to-Host"}


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open an SQLite file without ever writing to it or beside it."""
    uri = path.absolute().as_uri() + "?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True)


def cut_short(path: Path) -> str | None:
    """Why an SQLite file is incomplete (still being copied, or truncated), from its 100-byte header,
    or None. An SQLite database is whole pages, and its header counts them when the count is valid
    (header bytes 24-27 equal bytes 92-95, https://www.sqlite.org/fileformat2.html#in_header_database_size)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.read(100)
    if not header.startswith(MAGIC):
        return None
    if len(header) < 100:
        return f"an SQLite file that ends inside its 100-byte header ({size} bytes)"
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return None           # not a header SQLite wrote: let SQLite itself judge the file
    pages = int.from_bytes(header[28:32], "big")
    if pages and header[24:28] == header[92:96] and size < pages * page:
        return f"an SQLite file cut short: {size:,} of the {pages * page:,} bytes its header declares"
    if size % page:
        return f"an SQLite file cut short: {size:,} bytes is not a whole number of its {page}-byte pages"
    return None


CUT_HINT = "still being copied, or truncated? Wait for the copy to finish or re-export it with nsys export --type sqlite"


def _identity(path: Path) -> tuple:
    """Which file, in which state."""
    stat = path.stat()
    return (str(path.absolute()), stat.st_size, stat.st_mtime_ns, stat.st_ino)


class NsysSqlite:
    name: ClassVar[str] = "nsys-sqlite"

    def __init__(self):
        # The connection (and table names) of the file sniff claimed last, handed to read() of the same
        # file unchanged: opening an export parses its schema (~100 tables), a third of a small read.
        # Kept per thread: a connection serves (and is closed by) the thread that opened it.
        self._local = threading.local()

    def sniff(self, path: Path, head: bytes) -> bool:
        if not head.startswith(MAGIC):
            return False
        self._forget_sniffed()
        try:
            key = _identity(path)
            con = connect_read_only(path)
            try:
                names = _tables(con)
            except BaseException:
                con.close()
                raise
        except (sqlite3.DatabaseError, OSError):
            return False
        if not names & set(NSYS_MARKERS[:3]):
            con.close()
            return False
        self._local.sniffed = (key, con, names)
        return True

    def _forget_sniffed(self) -> None:
        sniffed, self._local.sniffed = getattr(self._local, "sniffed", None), None
        if sniffed is not None:
            sniffed[1].close()

    def _connect(self, path: Path) -> tuple[sqlite3.Connection, set[str] | None]:
        """The sniffed connection where it is this file's, unchanged since, else a new one."""
        sniffed, self._local.sniffed = getattr(self._local, "sniffed", None), None
        if sniffed is not None:
            if sniffed[0] == _identity(path):
                return sniffed[1], sniffed[2]
            sniffed[1].close()
        return connect_read_only(path), None

    def read(self, path: Path) -> ReadResult:
        cut = cut_short(path)
        if cut:
            self._forget_sniffed()
            raise InputError(path, f"{cut} ({CUT_HINT})")
        try:
            con, names = self._connect(path)
            try:
                return self._read(path, con, names)
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise InputError(path, f"unreadable SQLite database ({exc}); re-export it with "
                             "nsys export --type sqlite") from None

    def _read(self, path: Path, con: sqlite3.Connection, names: set[str] | None = None) -> ReadResult:
        tables = _Tables(con, names)
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise NothingToStore(path, "no CUDA kernel activity in this nsys export (no CUPTI_ACTIVITY_KIND_KERNEL "
                             "table); profile with nsys profile --trace=cuda")
        devices = _devices(con, tables)
        columns = _activities(con, tables)
        rows = len(columns["start_ns"])
        contexts = _nvtx_contexts(con, tables, columns["correlation_id"], columns.pop("_global_pid"))
        for name in ("framework_op", "framework_op_id", "op_shapes", "nvtx_path", "nvtx_range"):
            columns[name] = [getattr(c, name) if c is not None else None for c in contexts]
        columns["device_name"] = [devices.get((pid, device)) or devices.get((None, device))
                                  for pid, device in zip(columns["process_id"], columns["device_id"])]
        nothing = [None] * rows
        values = [columns.get(name, nothing) for name in TIMELINE_COLUMNS]
        warnings: list[str] = []
        timeline = _checked_timeline(path, values, _session_start_ns(con, tables), warnings)
        gpu = base.most_used([name for name, activity in zip(columns["device_name"], columns["activity"])
                              if activity == "kernel"])
        if gpu is None:
            gpu = next(iter(sorted(set(devices.values()) - {None})), None)
        return ReadResult(path=path, format=self.name, page="timeline", tool="nsys", timeline=timeline,
                          gpu_name=gpu, tool_version=_version(con, tables),
                          run_info={**_gpu_info(con, tables, gpu), **_session_date(con, tables)},
                          warnings=warnings + _missing_tables(path, con, tables, columns["activity"]))


# The table each activity of the timeline comes from, for a warning naming a row.
_TABLE_OF = dict(zip(ACTIVITIES, ACTIVITY_TABLES))
_ACTIVITY, _CORRELATION = list(TIMELINE_COLUMNS).index("activity"), list(TIMELINE_COLUMNS).index("correlation_id")
_START = list(TIMELINE_COLUMNS).index("start_ns")


def _checked_timeline(path: Path, values: list[list], session_start_ns: int, warnings: list[str]) -> pl.DataFrame:
    """The timeline frame, where a start or end that no 64-bit column holds (a REAL of 1e20, inf),
    that is a time past 2262 (after the session's start) or an end before its start leaves its row
    out with a warning, and any
    other such value is NULL with one (cells.checked_rows): never a builder's error or a wrapped time."""
    starts = [s for s in values[_START] if isinstance(s, int)]
    try:
        if session_start_ns and starts and max(starts) > cells.INT64_MAX - session_start_ns:
            raise OverflowError("a time past 2262")
        frame = base.frame_of_columns(values, TIMELINE_COLUMNS)
        if not cells.has_negative_duration(frame):
            return frame
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        pass
    def where(row: tuple) -> tuple[None, str]:
        return None, f"{_TABLE_OF.get(row[_ACTIVITY], row[_ACTIVITY])} row of correlationId {row[_CORRELATION]}"
    rows = cells.checked_rows(path, list(zip(*values)), TIMELINE_COLUMNS, 0, ("start_ns", "duration_ns"), where,
                              warnings, time_offset=session_start_ns)
    if not rows:
        raise InputError(path, f"no activity has a usable time: {warnings[-1].partition(': ')[2]}")
    return base.frame_of_rows(rows, TIMELINE_COLUMNS)


def _session_start_ns(con: sqlite3.Connection, tables: "_Tables") -> int:
    """The session's start in ns since the epoch (TARGET_INFO_SESSION_START_TIME), 0 where unknown."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables or "utcEpochNs" not in _columns(
            tables, "TARGET_INFO_SESSION_START_TIME"):
        return 0
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME WHERE utcEpochNs > 0 LIMIT 1").fetchone()
    return row[0] if row is not None and isinstance(row[0], int) and 0 < row[0] <= cells.INT64_MAX else 0


def _missing_tables(path: Path, con: sqlite3.Connection, tables: "_Tables", activities: list[str]) -> list[str]:
    """Warnings for tables whose absence other tables contradict (an export damaged or edited): what
    could not be stored because of it."""
    warnings = []
    if "kernel" in activities and "TARGET_INFO_GPU" not in tables:
        warnings.append(f"no TARGET_INFO_GPU table although the export has kernels: their GPU is unknown "
                        f"(stored as 'unknown'); re-export it with nsys export --type sqlite")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables and "NVTX_EVENTS" in tables and con.execute(
            f"SELECT 1 FROM NVTX_EVENTS WHERE eventType IN ({','.join(map(str, NVTX_RANGE_TYPES))}) LIMIT 1").fetchone():
        warnings.append("NVTX ranges but no CUPTI_ACTIVITY_KIND_RUNTIME table (the CUDA calls that launched the "
                        "kernels): no kernel could be placed in its NVTX range; re-export it with nsys export --type sqlite")
    if ("CUPTI_ACTIVITY_KIND_MEMCPY" not in tables and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables
            and "StringIds" in tables and "nameId" in _columns(tables, "CUPTI_ACTIVITY_KIND_RUNTIME")):
        copies = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                             "WHERE s.value LIKE 'cudaMemcpy%' OR s.value LIKE 'cuMemcpy%'").fetchone()[0]
        if copies:
            warnings.append(f"{copies} cudaMemcpy call(s) but no CUPTI_ACTIVITY_KIND_MEMCPY table: their copies are "
                            "not stored; re-export it with nsys export --type sqlite")
    return [str(InputError(path, warning)) for warning in warnings]


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


class _Tables(set):
    """The export's table (and view) names; each one's columns asked once (TARGET_INFO_GPU's are used thrice)."""

    def __init__(self, con: sqlite3.Connection, names: set[str] | None = None):
        super().__init__(_tables(con) if names is None else names)
        self.con = con
        self.columns: dict[str, set[str]] = {}


def _columns(tables: _Tables, table: str) -> set[str]:
    if table not in tables.columns:
        tables.columns[table] = {r[1] for r in tables.con.execute(f'PRAGMA table_info("{table}")')}
    return tables.columns[table]


def _version(con: sqlite3.Connection, tables: _Tables) -> str | None:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables and {"name", "value"} <= _columns(tables, table):
            found = con.execute(f"SELECT value FROM {table} WHERE name = 'EXPORT_PRODUCT_VERSION'").fetchone()
            if found:
                return found[0]
    return None


def _devices(con: sqlite3.Connection, tables: _Tables) -> dict[tuple, str]:
    """(process id or None, CUDA device id) -> GPU name."""
    if "TARGET_INFO_GPU" not in tables:
        return {}
    columns = _columns(tables, "TARGET_INFO_GPU")
    gpus = {row[0]: row for row in con.execute(
        f"SELECT id, name, {'cuDevice' if 'cuDevice' in columns else 'NULL'} FROM TARGET_INFO_GPU")}
    names: dict[tuple, str] = {}
    for gpu_id, name, cu_device in gpus.values():
        names[(None, cu_device if cu_device is not None else gpu_id)] = name
    if "TARGET_INFO_CUDA_DEVICE" in tables and {"gpuId", "cudaId", "pid"} <= _columns(tables, "TARGET_INFO_CUDA_DEVICE"):
        for gpu_id, cuda_id, pid in con.execute("SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE"):
            if gpu_id in gpus:
                names[(pid, cuda_id)] = gpus[gpu_id][1]
    return names


def _gpu_info(con: sqlite3.Connection, tables: _Tables, gpu: str | None) -> dict:
    """sm_count and compute_capability of the run's GPU (the first TARGET_INFO_GPU row of that name
    that is not a placeholder)."""
    if "TARGET_INFO_GPU" not in tables or not {"name", "smCount", "computeMajor", "computeMinor"} <= _columns(
            tables, "TARGET_INFO_GPU"):
        return {}
    # nsys 2021.5 may write a placeholder row first (compute capability 0.0, no SMs) before the row
    # that describes the GPU: a row without a compute capability describes no GPU
    row = con.execute("SELECT smCount, computeMajor, computeMinor FROM TARGET_INFO_GPU WHERE (name = ? OR ? IS NULL) "
                      "AND computeMajor > 0 ORDER BY id LIMIT 1", [gpu, gpu]).fetchone()
    if row is None:
        return {}
    sm_count, major, minor = row
    return {"sm_count": int(sm_count) if sm_count else None,
            "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None}


def _session_date(con: sqlite3.Connection, tables: _Tables) -> dict:
    """run_date: the UTC day the capture started (TARGET_INFO_SESSION_START_TIME, in every export schema
    seen: 2.9.1 of nsys 2022.2 to 3.25.0 of 2026.2), so that rollups place an nsys run without a manifest
    on its day."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables or "utcEpochNs" not in _columns(
            tables, "TARGET_INFO_SESSION_START_TIME"):
        return {}
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME WHERE utcEpochNs > 0 LIMIT 1").fetchone()
    if row is None or not isinstance(row[0], int):
        return {}
    try:
        return {"run_date": datetime.fromtimestamp(row[0] // 1_000_000_000, UTC).date()}
    except (OverflowError, OSError, ValueError):     # a damaged timestamp: the run just has no date
        return {}


def _optional(columns: set[str], name: str) -> str:
    return f"a.{name}" if name in columns else "NULL"


def _activities(con: sqlite3.Connection, tables: _Tables) -> dict[str, list]:
    """Kernels, memcpy and memset activity as timeline columns (and _global_pid), in one query ordered
    by start, then rowid, then table (kernels first): SQLite sorts and joins the names, and each
    column is made from the fetched rows at once instead of a dict per row."""
    columns = _columns(tables, "CUPTI_ACTIVITY_KIND_KERNEL")
    mangled = "mangledName" in columns
    selects = [f"""
        SELECT 0, a.rowid, a.start, a.end, a.deviceId, a.contextId, a.streamId, a.correlationId, a.globalPid,
               a.gridX, a.gridY, a.gridZ, a.blockX, a.blockY, a.blockZ, a.registersPerThread,
               {_optional(columns, 'staticSharedMemory')}, {_optional(columns, 'dynamicSharedMemory')},
               d.value, s.value, {'m.value' if mangled else 'NULL'}, NULL, NULL
        FROM CUPTI_ACTIVITY_KIND_KERNEL a
        LEFT JOIN StringIds d ON d.id = a.demangledName
        LEFT JOIN StringIds s ON s.id = a.shortName
        {'LEFT JOIN StringIds m ON m.id = a.mangledName' if mangled else ''}"""]
    for kind, table in ((1, "CUPTI_ACTIVITY_KIND_MEMCPY"), (2, "CUPTI_ACTIVITY_KIND_MEMSET")):
        if table in tables:
            columns = _columns(tables, table)
            selects.append(f"""
        SELECT {kind}, a.rowid, a.start, a.end, a.deviceId, a.contextId, a.streamId, a.correlationId, a.globalPid,
               NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               {_optional(columns, 'bytes')}, {_optional(columns, 'copyKind')}
        FROM {table} a""")
    # nulls first, as the reader always sorted (SQLite puts NULL first in ascending order)
    fetched = con.execute(" UNION ALL ".join(selects) + " ORDER BY 3, 2, 1").fetchall()
    (kinds, _, starts, ends, devices, contexts, streams, correlations, global_pids, gx, gy, gz, bx, by, bz,
     registers, static, dynamic, demangled, short, mangled_names, sizes, copy_kinds) = (
        zip(*fetched) if fetched else [()] * 23)
    copy_names = dict(COPY_KINDS)
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        copy_names.update({r[0]: r[1] for r in con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")})
    # nsys's own reports name memory operations "[CUDA memcpy Host-to-Device]" and "[CUDA memset]"
    names = [(d or s or m or "") if k == 0 else
             f"[CUDA memcpy {copy_names.get(c, 'Unknown')}]" if k == 1 else "[CUDA memset]"
             for k, d, s, m, c in zip(kinds, demangled, short, mangled_names, copy_kinds)]
    pids = [(g >> 24) & 0xFFFFFF if g is not None else None for g in global_pids]
    return {
        "activity": [ACTIVITIES[k] for k in kinds], "device_id": list(devices), "context_id": list(contexts),
        "stream_id": list(streams), "process_id": pids, "correlation_id": list(correlations),
        "start_ns": list(starts), "duration_ns": [end - start for start, end in zip(starts, ends)],
        "grid_x": list(gx), "grid_y": list(gy), "grid_z": list(gz), "block_x": list(bx), "block_y": list(by),
        "block_z": list(bz), "registers_per_thread": list(registers),
        "shared_mem_bytes": [(a or 0) + (b or 0) if a is not None or b is not None else None
                             for a, b in zip(static, dynamic)],
        "bytes": list(sizes), "kernel_name": names, "kernel_short_name": list(short),
        "kernel_mangled": list(mangled_names), "_global_pid": global_pids,
    }


def _nvtx_contexts(con: sqlite3.Connection, tables: _Tables, correlations: list, global_pids: list | tuple
                   ) -> list[nvtx.OpContext | None]:
    """framework_op, op_shapes, nvtx_path and nvtx_range of each activity: from the NVTX ranges
    enclosing the CUDA API call that launched it (same thread); None where none does."""
    found: list[nvtx.OpContext | None] = [None] * len(correlations)
    if not {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
        return found
    calls: dict[tuple, tuple[int, int]] = {}
    # only the calls that launched an activity read here (the runtime table holds every CUDA call)
    launched = " UNION ".join(f"SELECT correlationId FROM {table}" for table in ACTIVITY_TABLES if table in tables)
    for correlation, tid, start in con.execute(
            "SELECT correlationId, globalTid, min(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            f"WHERE correlationId IN ({launched}) GROUP BY correlationId, globalTid"):
        key = (correlation, tid & PID_MASK if tid is not None else None)
        if key not in calls or start < calls[key][1]:
            calls[key] = (tid, start)
    nvtx_columns = _columns(tables, "NVTX_EVENTS")
    text_join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in nvtx_columns else ""
    text = "coalesce(e.text, s.value)" if text_join else "e.text"
    domain = "e.domainId" if "domainId" in nvtx_columns else "NULL"
    domains = {}
    for domain_id, tid, name in con.execute(
            f"SELECT {domain}, e.globalTid, {text} FROM NVTX_EVENTS e {text_join} WHERE e.eventType = ?",
            (NVTX_DOMAIN_CREATE,)):
        domains[(domain_id, (tid or 0) & PID_MASK)] = name
    ranges: dict[int, list[tuple[int, int, nvtx.Range]]] = {}
    types = ",".join(str(t) for t in NVTX_RANGE_TYPES)
    for start, end, tid, domain_id, label in con.execute(
            f"SELECT e.start, e.end, e.globalTid, {domain}, {text} FROM NVTX_EVENTS e {text_join} "
            f"WHERE e.eventType IN ({types}) AND e.end IS NOT NULL"):
        name = domains.get((domain_id, (tid or 0) & PID_MASK)) if domain_id else None
        ranges.setdefault(tid, []).append(
            (start, end, nvtx.Range(name or nvtx.DEFAULT_DOMAIN, label or "")))
    wanted: dict[int, list[tuple[int, int]]] = {}
    for index, key in enumerate(zip(correlations, global_pids)):
        call = calls.get(key)
        if call is not None and call[0] in ranges:
            wanted.setdefault(call[0], []).append((call[1], index))
    contexts: dict[tuple, nvtx.OpContext] = {}
    for tid, queries in wanted.items():
        spans = sorted(ranges[tid], key=lambda s: (s[0], -s[1]))
        stack: list[tuple] = []
        i = 0
        for moment, index in sorted(queries, key=lambda q: q[0]):
            while i < len(spans) and spans[i][0] <= moment:
                stack.append(spans[i])
                i += 1
            stack = [s for s in stack if s[1] >= moment]
            names = tuple(s[2] for s in stack)
            context = contexts.get(names)
            if context is None:     # the same stacks recur launch after launch: parse each once
                context = contexts[names] = nvtx.context_of_ranges(list(names))
            found[index] = context
    return found
