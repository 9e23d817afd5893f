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

The database is opened read-only and immutable: nothing (journal, lock, index) is written beside it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import base
from kwarehouse.ingest.base import TIMELINE_COLUMNS, ReadResult
from kwarehouse.normalize import nvtx

MAGIC = b"SQLite format 3\x00"
NSYS_MARKERS = ("META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", "StringIds")
# NVTX_EVENTS.eventType values (nsys ENUM_NSYS_EVENT_TYPE): push/pop and start/end ranges, domain names.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
NVTX_DOMAIN_CREATE = 75
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
PID_MASK = 0xFFFFFFFFFF000000   # globalTid -> its process's globalPid
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


class NsysSqlite:
    name: ClassVar[str] = "nsys-sqlite"

    def sniff(self, path: Path, head: bytes) -> bool:
        if not head.startswith(MAGIC):
            return False
        try:
            con = connect_read_only(path)
            try:
                return bool(_tables(con) & set(NSYS_MARKERS[:3]))
            finally:
                con.close()
        except sqlite3.DatabaseError:
            return False

    def read(self, path: Path) -> ReadResult:
        cut = cut_short(path)
        if cut:
            raise InputError(path, f"{cut} ({CUT_HINT})")
        try:
            con = connect_read_only(path)
            try:
                return self._read(path, con)
            finally:
                con.close()
        except sqlite3.DatabaseError as exc:
            raise InputError(path, f"unreadable SQLite database ({exc}); re-export it with "
                             "nsys export --type sqlite") from None

    def _read(self, path: Path, con: sqlite3.Connection) -> ReadResult:
        tables = _Tables(con)
        activity_tables = [t for t in ACTIVITY_TABLES if t in tables]
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise InputError(path, "no CUDA kernel activity in this nsys export (no CUPTI_ACTIVITY_KIND_KERNEL "
                             "table); profile with nsys profile --trace=cuda")
        devices = _devices(con, tables)
        frames = [_kernels(con, tables)]
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in activity_tables:
            frames.append(_memops(con, tables, "CUPTI_ACTIVITY_KIND_MEMCPY"))
        if "CUPTI_ACTIVITY_KIND_MEMSET" in activity_tables:
            frames.append(_memops(con, tables, "CUPTI_ACTIVITY_KIND_MEMSET"))
        rows = [row for frame in frames for row in frame]
        _attach_nvtx(con, tables, rows)
        for row in rows:
            row["device_name"] = devices.get((row.pop("_pid"), row["device_id"])) or devices.get((None, row["device_id"]))
        # by start, then rowid (nulls first, as polars sorts); built column-wise: a handful of polars
        # calls on a frame this small cost more than reading it
        rows.sort(key=lambda row: (row["start_ns"] is not None, row["start_ns"] or 0, row["_order"] is not None,
                                   row["_order"] or 0))
        timeline = pl.DataFrame({name: [row[name] for row in rows] for name in TIMELINE_COLUMNS},
                                schema=TIMELINE_COLUMNS)
        gpu = base.most_used([row["device_name"] for row in rows if row["activity"] == "kernel"])
        if gpu is None:
            gpu = next(iter(sorted(set(devices.values()) - {None})), None)
        return ReadResult(path=path, format=self.name, page="timeline", tool="nsys", timeline=timeline,
                          gpu_name=gpu, tool_version=_version(con, tables), run_info=_gpu_info(con, tables, gpu))


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


class _Tables(set):
    """The export's table (and view) names; each one's columns asked once (TARGET_INFO_GPU's are used thrice)."""

    def __init__(self, con: sqlite3.Connection):
        super().__init__(_tables(con))
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
    """sm_count and compute_capability of the run's GPU (the first TARGET_INFO_GPU row of that name)."""
    if "TARGET_INFO_GPU" not in tables or not {"name", "smCount", "computeMajor", "computeMinor"} <= _columns(
            tables, "TARGET_INFO_GPU"):
        return {}
    row = con.execute("SELECT smCount, computeMajor, computeMinor FROM TARGET_INFO_GPU WHERE name = ? OR ? IS NULL "
                      "ORDER BY id LIMIT 1", [gpu, gpu]).fetchone()
    if row is None:
        return {}
    sm_count, major, minor = row
    return {"sm_count": int(sm_count) if sm_count else None,
            "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None}


def _optional(columns: set[str], name: str, alias: str | None = None) -> str:
    return f"a.{name} AS {alias or name}" if name in columns else f"NULL AS {alias or name}"


def _kernels(con: sqlite3.Connection, tables: _Tables) -> list[dict]:
    columns = _columns(tables, "CUPTI_ACTIVITY_KIND_KERNEL")
    mangled_join = ("LEFT JOIN StringIds m ON m.id = a.mangledName" if "mangledName" in columns else "")
    query = f"""
        SELECT a.rowid, a.start, a.end, a.deviceId, a.contextId, a.streamId, a.correlationId, a.globalPid,
               a.gridX, a.gridY, a.gridZ, a.blockX, a.blockY, a.blockZ, a.registersPerThread,
               {_optional(columns, 'staticSharedMemory')}, {_optional(columns, 'dynamicSharedMemory')},
               d.value, s.value, {'m.value' if mangled_join else 'NULL'}
        FROM CUPTI_ACTIVITY_KIND_KERNEL a
        LEFT JOIN StringIds d ON d.id = a.demangledName
        LEFT JOIN StringIds s ON s.id = a.shortName
        {mangled_join}
    """
    rows = []
    for (rowid, start, end, device, context, stream, correlation, global_pid, gx, gy, gz, bx, by, bz, regs,
         static_smem, dynamic_smem, demangled, short, mangled) in con.execute(query):
        rows.append(_row("kernel", rowid, start, end, device, context, stream, correlation, global_pid,
                         kernel_name=demangled or short or mangled or "", short=short, mangled=mangled,
                         grid=(gx, gy, gz), block=(bx, by, bz), registers=regs,
                         shared=(static_smem or 0) + (dynamic_smem or 0)
                         if static_smem is not None or dynamic_smem is not None else None))
    return rows


def _memops(con: sqlite3.Connection, tables: _Tables, table: str) -> list[dict]:
    columns = _columns(tables, table)
    memcpy = table.endswith("MEMCPY")
    kinds = dict(COPY_KINDS)
    if memcpy and "ENUM_CUDA_MEMCPY_OPER" in tables:
        kinds.update({r[0]: r[1] for r in con.execute("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")})
    query = f"""
        SELECT a.rowid, a.start, a.end, a.deviceId, a.contextId, a.streamId, a.correlationId, a.globalPid,
               {_optional(columns, 'bytes')}, {_optional(columns, 'copyKind')}
        FROM {table} a
    """
    rows = []
    for rowid, start, end, device, context, stream, correlation, global_pid, size, kind in con.execute(query):
        # nsys's own reports name these "[CUDA memcpy Host-to-Device]" and "[CUDA memset]"
        name = f"[CUDA memcpy {kinds.get(kind, 'Unknown')}]" if memcpy else "[CUDA memset]"
        rows.append(_row("memcpy" if memcpy else "memset", rowid, start, end, device, context, stream,
                         correlation, global_pid, kernel_name=name, bytes_=size))
    return rows


def _row(activity, rowid, start, end, device, context, stream, correlation, global_pid, *, kernel_name,
         short=None, mangled=None, grid=(None, None, None), block=(None, None, None), registers=None,
         shared=None, bytes_=None) -> dict:
    return {
        "_order": rowid, "activity": activity, "device_id": device, "device_name": None, "context_id": context,
        "stream_id": stream, "process_id": (global_pid >> 24) & 0xFFFFFF if global_pid is not None else None,
        "correlation_id": correlation, "start_ns": start, "duration_ns": end - start,
        "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2], "block_x": block[0], "block_y": block[1],
        "block_z": block[2], "registers_per_thread": registers, "shared_mem_bytes": shared, "bytes": bytes_,
        "kernel_name": kernel_name, "kernel_short_name": short, "kernel_mangled": mangled,
        "framework_op": None, "op_shapes": None, "nvtx_path": None, "nvtx_range": None,
        "framework_op_id": None, "op_dtypes": None, "op_args": None,   # NVTX records neither dtypes nor scalars
        "_pid": (global_pid >> 24) & 0xFFFFFF if global_pid is not None else None,
        "_global_pid": global_pid,
    }


def _attach_nvtx(con: sqlite3.Connection, tables: _Tables, rows: list[dict]) -> None:
    """Fill framework_op, op_shapes, nvtx_path and nvtx_range from the NVTX ranges enclosing the
    CUDA API call of each activity (same thread)."""
    if not {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
        for row in rows:
            row.pop("_global_pid", None)
        return
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
    wanted: dict[int, list[tuple[int, dict]]] = {}
    for row in rows:
        global_pid = row.pop("_global_pid", None)
        call = calls.get((row["correlation_id"], global_pid))
        if call is not None and call[0] in ranges:
            wanted.setdefault(call[0], []).append((call[1], row))
    contexts: dict[tuple, nvtx.OpContext] = {}
    for tid, queries in wanted.items():
        spans = sorted(ranges[tid], key=lambda s: (s[0], -s[1]))
        stack: list[tuple] = []
        i = 0
        for moment, row in sorted(queries, key=lambda q: q[0]):
            while i < len(spans) and spans[i][0] <= moment:
                stack.append(spans[i])
                i += 1
            stack = [s for s in stack if s[1] >= moment]
            names = tuple(s[2] for s in stack)
            context = contexts.get(names)
            if context is None:     # the same stacks recur launch after launch: parse each once
                context = contexts[names] = nvtx.context_of_ranges(list(names))
            row.update(framework_op=context.framework_op, framework_op_id=context.framework_op_id,
                       op_shapes=context.op_shapes,
                       nvtx_path=context.nvtx_path, nvtx_range=context.nvtx_range)
