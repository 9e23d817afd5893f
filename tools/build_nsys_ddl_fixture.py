"""Build test databases with the exact DDL nsys 2026.2.1 (export schema 3.25.0) writes.

No nsys 2026.2 export with kernels is public, only its CREATE TABLE text
(../shared/public-samples/nsys-2026.2.1_schema-3.25.0_h100_ddl-dump.sql). This script creates every
table from that text, then copies the rows of a real older export (nsys 2025.5.1, RTX 3090) into the
columns the two schemas share; columns new in 2026.2 that are NOT NULL get a neutral value
(tensorSizeMinusOneElements: ''); META_DATA_* rows are not copied (they describe the older export). With --no-cuda it leaves the CUDA activity tables out, as nsys does
for a report without CUDA activity (tables are created lazily). Usage:

    python tools/build_nsys_ddl_fixture.py DDL.sql SOURCE.sqlite TARGET.sqlite [--no-cuda]
"""

import re
import sqlite3
import sys

NEW_NOT_NULL_DEFAULTS = {"tensorSizeMinusOneElements": ""}


def main(ddl_path: str, source_path: str, target_path: str, no_cuda: bool) -> None:
    ddl = open(ddl_path, encoding="utf-8").read()
    statements = [s.strip() for s in re.split(r";\s*\n", ddl) if s.strip().upper().startswith("CREATE TABLE")]
    target = sqlite3.connect(target_path)
    source = sqlite3.connect(f"file:{source_path}?mode=ro", uri=True)
    source_tables = {r[0] for r in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for statement in statements:
        table = re.match(r"CREATE TABLE\s+(\w+)", statement).group(1)
        if no_cuda and table.startswith("CUPTI_ACTIVITY_KIND_"):
            continue
        target.execute(statement)
        # the export metadata describes the older export: it is not copied
        if table not in source_tables or table.startswith("META_DATA_"):
            continue
        target_columns = [r[1] for r in target.execute(f"PRAGMA table_info({table})")]
        source_columns = {r[1] for r in source.execute(f"PRAGMA table_info({table})")}
        shared = [c for c in target_columns if c in source_columns]
        extra = [c for c in target_columns if c not in source_columns and c in NEW_NOT_NULL_DEFAULTS]
        rows = source.execute(f"SELECT {', '.join(shared)} FROM {table}").fetchall()
        values = [tuple(row) + tuple(NEW_NOT_NULL_DEFAULTS[c] for c in extra) for row in rows]
        columns = shared + extra
        target.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                           values)
    target.commit()
    target.execute("VACUUM")
    target.close()


if __name__ == "__main__":
    main(*sys.argv[1:4], no_cuda="--no-cuda" in sys.argv)
