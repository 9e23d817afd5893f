"""Copy an nsys SQLite export keeping only the tables kwarehouse reads, unchanged (tests/data fixtures).

Dropped tables (OS runtime, scheduling, sampling, process lists ...) make most of a real export's size;
every kept table keeps all its rows and its exact CREATE TABLE text. Usage:

    python tools/trim_nsys_sqlite.py SRC.sqlite DST.sqlite
"""

import shutil
import sqlite3
import sys

KEEP_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_", "TARGET_INFO_", "ENUM_CUDA_", "StringIds",
                 "META_DATA_EXPORT", "EXPORT_META_DATA")


def main(source: str, target: str) -> None:
    shutil.copyfile(source, target)
    con = sqlite3.connect(target)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        if not table.startswith(KEEP_PREFIXES):
            con.execute(f'DROP TABLE "{table}"')
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
