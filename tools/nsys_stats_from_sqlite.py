"""Write nsys stats CSV fixtures from a real nsys SQLite export, for tests/data/nsys-stats-derived/.

No nsys is installed where kwarehouse is developed, so the report tables are computed here from the
SQLite export with the same definitions as NVIDIA's report scripts (reports/*.py of Nsight Systems):
cuda_gpu_kern_sum (current, the GridXYZ/BlockXYZ variant and the old Average/Minimum/Maximum header),
cuda_gpu_trace, nvtx_sum and nvtx_kern_sum, with `--timeunit usec` for one of them. The layout around
them is what `nsys stats --format csv` prints to stdout: "Processing [db] with [.../reports/R.py]..."
before each block, "SKIPPED: db does not contain NV Tools Extension (NVTX) data." when a report has
no input. Usage:

    python tools/nsys_stats_from_sqlite.py SRC.sqlite OUT_DIR NSYS_VERSION
"""

import csv
import io
import sqlite3
import statistics
import sys
from pathlib import Path

REPORTS_DIR = "/opt/nvidia/nsight-systems/{version}/host-linux-x64/reports"


def kernels(con):
    return con.execute("""
        SELECT k.start, k.end, k.correlationId, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ,
               k.registersPerThread, k.staticSharedMemory, k.dynamicSharedMemory, k.deviceId, k.contextId,
               k.streamId, s.value, k.globalPid
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start""").fetchall()


def stats(durations):
    return (sum(durations), len(durations), round(statistics.fmean(durations), 1),
            round(float(statistics.median(durations)), 1), min(durations), max(durations),
            round(statistics.stdev(durations), 1) if len(durations) > 1 else 0.0)


def table(header, rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def kern_sum(con, variant="current", unit="ns"):
    scale = {"ns": 1, "us": 1000}[unit]
    groups = {}
    for k in kernels(con):
        key = (k[15],) if variant != "gb" else (k[15], f"{k[3]:4d} {k[4]:4d} {k[5]:4d}", f"{k[6]:4d} {k[7]:4d} {k[8]:4d}")
        groups.setdefault(key, []).append(k[1] - k[0])
    grand = sum(sum(d) for d in groups.values())
    rows = []
    for key, durations in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        total, count, avg, med, lo, hi, sd = stats(durations)
        pct = round(total * 100.0 / grand, 1)
        if variant == "old":
            rows.append([pct, total, count, avg, lo, hi, key[0]])
        else:
            values = [pct, total, count, avg, med, lo, hi, sd]
            if scale != 1:   # --timeunit usec: three decimals
                values = [pct] + [round(v / scale, 3) for v in (total,)] + [count] + [
                    round(v / scale, 3) for v in (avg, med, lo, hi, sd)]
            rows.append(values + list(key[1:]) + [key[0]])
    if variant == "old":
        return table(["Time(%)", "Total Time (ns)", "Instances", "Average", "Minimum", "Maximum", "Name"], rows)
    header = ["Time (%)", f"Total Time ({unit})", "Instances", f"Avg ({unit})", f"Med ({unit})", f"Min ({unit})",
              f"Max ({unit})", f"StdDev ({unit})"] + (["GridXYZ", "BlockXYZ"] if variant == "gb" else []) + ["Name"]
    return table(header, rows)


def gpu_trace(con):
    devices = {r[0]: r[1] for r in con.execute("SELECT cuDevice, name FROM TARGET_INFO_GPU")}
    rows = []
    for k in kernels(con):
        rows.append([k[0], k[1] - k[0], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9],
                     f"{k[10] / 1e6:.3f}", f"{k[11] / 1e6:.3f}", "", "", "", "",
                     f"{devices.get(k[12], 'GPU')} ({k[12]})", k[13], "", k[14], k[15]])
    memcpy = con.execute("SELECT start, end, correlationId, bytes, deviceId, contextId, streamId, copyKind "
                         "FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall()
    kinds = {1: "Host-to-Device", 2: "Device-to-Host", 8: "Device-to-Device"}
    for m in memcpy:
        rows.append([m[0], m[1] - m[0], m[2], "", "", "", "", "", "", "", "", "", f"{m[3] / 1e6:.3f}",
                     f"{m[3] / 1e6 / ((m[1] - m[0]) / 1e9):.3f}", "Pageable", "Device",
                     f"{devices.get(m[4], 'GPU')} ({m[4]})", m[5], "", m[6], f"[CUDA memcpy {kinds.get(m[7], 'Unknown')}]"])
    rows.sort(key=lambda r: r[0])
    header = ["Start (ns)", "Duration (ns)", "CorrId", "GrdX", "GrdY", "GrdZ", "BlkX", "BlkY", "BlkZ", "Reg/Trd",
              "StcSMem (MB)", "DymSMem (MB)", "Bytes (MB)", "Throughput (MB/s)", "SrcMemKd", "DstMemKd", "Device",
              "Ctx", "GreenCtx", "Strm", "Name"]
    return table(header, rows)


def nvtx_ranges(con):
    return con.execute("""
        SELECT e.start, e.end, e.globalTid, coalesce(e.text, s.value), e.eventType
        FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
        WHERE e.eventType IN (59, 60, 70, 71) AND e.end IS NOT NULL""").fetchall()


def nvtx_sum(con):
    groups = {}
    for start, end, _, name, kind in nvtx_ranges(con):
        style = "PushPop" if kind in (59, 70) else "StartEnd"
        groups.setdefault((name, style), []).append(end - start)
    grand = sum(sum(d) for d in groups.values())
    rows = []
    for (name, style), durations in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        total, count, avg, med, lo, hi, sd = stats(durations)
        rows.append([round(total * 100.0 / grand, 1), total, count, avg, med, lo, hi, sd, style, name])
    return table(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                  "StdDev (ns)", "Style", "Range"], rows)


def nvtx_kern_sum(con):
    runtime = {}
    for correlation, tid, start, end in con.execute(
            "SELECT correlationId, globalTid, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        runtime.setdefault(correlation, []).append((tid, start, end))
    ranges = nvtx_ranges(con)
    groups = {}
    for k in kernels(con):
        for tid, start, end in runtime.get(k[2], []):
            if (tid & 0xFFFFFFFFFF000000) != k[16]:
                continue
            for r_start, r_end, r_tid, name, kind in ranges:
                if r_tid == tid and r_start <= start and r_end >= end:
                    style = "PushPop" if kind in (59, 70) else "StartEnd"
                    key = (name, style, (tid >> 24) & 0xFFFFFF, tid & 0xFFFFFF, k[15])
                    groups.setdefault(key, {})[(r_start, r_end)] = None
                    groups[key].setdefault(("kernels",), {})[k[0]] = k[1] - k[0]
    rows = []
    for (name, style, pid, tid, kernel), found in sorted(groups.items()):
        durations = list(found.pop(("kernels",)).values())
        total, count, avg, med, lo, hi, sd = stats(durations)
        rows.append([name, style, pid, tid, len(found), count, total, avg, med, lo, hi, sd, kernel])
    return table(["NVTX Range", "Style", "PID", "TID", "NVTX Inst", "Kern Inst", "Total Time (ns)", "Avg (ns)",
                  "Med (ns)", "Min (ns)", "Max (ns)", "StdDev (ns)", "Kernel Name"], rows)


def main(source: str, out_dir: str, version: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    db = Path(source).name
    has_nvtx = con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone()[0]
    reports = REPORTS_DIR.format(version=version)
    stdout = []
    for name, make in (("cuda_gpu_kern_sum", kern_sum), ("nvtx_sum", nvtx_sum), ("nvtx_kern_sum", nvtx_kern_sum),
                       ("cuda_gpu_trace", gpu_trace)):
        stdout.append(f"Processing [{db}] with [{reports}/{name}.py]... \n")
        if name.startswith("nvtx") and not has_nvtx:
            stdout.append(f"SKIPPED: {db} does not contain NV Tools Extension (NVTX) data.\n\n")
            continue
        stdout.append(make(con) + "\n")
    (out / "stats_stdout.csv").write_text("".join(stdout))
    (out / "report_cuda_gpu_kern_sum_gb.csv").write_text(kern_sum(con, "gb"))
    (out / "report_gpukernsum_old.csv").write_text(kern_sum(con, "old"))
    (out / "report_cuda_gpu_kern_sum_usec.csv").write_text(kern_sum(con, "current", "us"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
