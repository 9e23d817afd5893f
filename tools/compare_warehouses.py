"""Compare two kwh warehouses table by table, row for row: the proof that a speed-up changed nothing.

Every table of src/kwarehouse/schema.sql is read from each warehouse's warehouse.duckdb (the views kwh
publishes over exactly the committed Parquet files of its catalog; opened read-only, nothing is rebuilt,
so an old warehouse is read as its own kwh version left it) and compared as a multiset of rows with
EXCEPT ALL both ways: order-independent, duplicates counted, every value compared exactly (DOUBLEs by
value, no tolerance: kwh stores the exporters' numbers exactly; NaN equals NaN as in DuckDB, and
-0.0 equals 0.0). Without a warehouse.duckdb the tables are read through the kwarehouse on the path
(Warehouse.connect()).

Columns left out, because two ingests of the same files legitimately differ there:
  runs.ingested_at   the wall-clock time of the ingest (UTC).
Nothing else: the tables hold no Parquet part paths (file names stay in the catalog, not in the rows),
and run ids, source_dir and source_files depend only on the export paths and their contents, so both
warehouses must be ingested from the same paths. More can be left out with --ignore TABLE.COLUMN.
A column only one warehouse has (a column added in between) is reported and counts as a difference
unless ignored.

Output: one line per table, "TABLE: same N rows" or "TABLE: DIFFERENT: ..." followed by the first rows
only one side has (sorted by every column); exit status 1 on any difference.

    python tools/compare_warehouses.py /tmp/P-before /tmp/A-after
    python tools/compare_warehouses.py A B --tables kernels,metrics --show 10

The BEFORE warehouses of issue 23 (kwh at d388f0d, before the ingest speed-ups; built 2026-11-24
00:02 UTC, load ~7 on the 2-core machine). The fleets are bench/run.py's build_fleet over the corpus
tarballs (../shared/corpus/h100-2026-11), made once and kept, because run ids hash the export paths:

    # the fleets (/tmp/P-fleet20: 20 runs, /tmp/P-fleet100: 100 runs)
    cd /work/main && .venv/bin/python -c 'import sys; from pathlib import Path; sys.path.insert(0, "bench"); import run; o = run.sources(Path("/tmp/P-fleetsrc")); run.build_fleet(Path("/tmp/P-fleet20"), 20, o); run.build_fleet(Path("/tmp/P-fleet100"), 100, o)'
    # kwh as of d388f0d
    git worktree add /tmp/P-base d388f0d
    PYTHONPATH=/tmp/P-base/src /work/main/.venv/bin/python -m kwarehouse -w /tmp/P-before ingest /tmp/corpus/a /tmp/c11b /tmp/P-fleet20
    PYTHONPATH=/tmp/P-base/src /work/main/.venv/bin/python -m kwarehouse -w /tmp/P-before100 ingest /tmp/P-fleet100

The AFTER warehouses the same way from the current tree (same inputs, same paths, one ingest command each):

    /work/main/.venv/bin/kwh -w /tmp/P-after ingest /tmp/corpus/a /tmp/c11b /tmp/P-fleet20
    /work/main/.venv/bin/kwh -w /tmp/P-after100 ingest /tmp/P-fleet100
    .venv/bin/python tools/compare_warehouses.py /tmp/P-before /tmp/P-after
    .venv/bin/python tools/compare_warehouses.py /tmp/P-before100 /tmp/P-after100
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import duckdb

SCHEMA = Path(__file__).resolve().parents[1] / "src" / "kwarehouse" / "schema.sql"
# (table, column) pairs two ingests of the same files may differ in; see the module docstring
LEGITIMATELY_DIFFERENT = {("runs", "ingested_at")}


def schema_tables(schema: Path = SCHEMA) -> dict[str, list[str]]:
    """Every table of schema.sql with its columns in order (DuckDB parses the DDL)."""
    con = duckdb.connect()
    con.execute(schema.read_text())
    out = {}
    names = re.findall(r"^CREATE TABLE (?:IF NOT EXISTS )?\"?(\w+)", schema.read_text(), re.MULTILINE | re.IGNORECASE)
    for name in names:                   # in the order schema.sql defines them
        out[name] = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [name]).fetchall()]
    con.close()
    return out


def attach(con: duckdb.DuckDBPyConnection, root: Path, alias: str) -> None:
    """Make the warehouse at `root` readable as schema `alias` of `con`."""
    published = root / "warehouse.duckdb"
    if published.exists():
        con.execute(f"ATTACH '{published}' AS {alias} (READ_ONLY)")
        return
    from kwarehouse.store.warehouse import Warehouse    # no published file: the current kwh builds the views
    source = Warehouse(root).connect()
    con.execute(f"ATTACH ':memory:' AS {alias}")
    for (name,) in source.execute("SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views() "
                                  "WHERE NOT internal").fetchall():
        con.register(f"_{alias}_{name}", source.sql(f'SELECT * FROM "{name}"').to_arrow_table())
        con.execute(f'CREATE TABLE {alias}."{name}" AS SELECT * FROM "_{alias}_{name}"')
    source.close()


def columns_of(con: duckdb.DuckDBPyConnection, alias: str, table: str) -> list[str] | None:
    """The columns `table` has in warehouse `alias`, or None when it has no such table."""
    try:
        return [d[0] for d in con.execute(f'SELECT * FROM {alias}."{table}" LIMIT 0').description]
    except duckdb.CatalogException:
        return None


def compare_table(con: duckdb.DuckDBPyConnection, table: str, ignored: set[tuple[str, str]], show: int) -> tuple[bool, list[str]]:
    """(same, lines) for one table of warehouses `a` and `b` attached to `con`."""
    a_columns, b_columns = columns_of(con, "a", table), columns_of(con, "b", table)
    if a_columns is None or b_columns is None:
        return False, [f"{table}: DIFFERENT: no such table in {'A' if a_columns is None else 'B'}"]
    notes = []
    one_sided = [(c, "A") for c in a_columns if c not in b_columns] + [(c, "B") for c in b_columns if c not in a_columns]
    differs = False
    for column, side in one_sided:
        if (table, column) not in ignored:
            differs = True
            notes.append(f"column {column} only in {side}")
    compared = [c for c in a_columns if c in b_columns and (table, c) not in ignored]
    select = ", ".join(f'"{c}"' for c in compared)
    counts = [con.execute(f'SELECT count(*) FROM {side}."{table}"').fetchone()[0] for side in ("a", "b")]
    lines = []
    only = {}
    for side, other in (("a", "b"), ("b", "a")):
        difference = f'SELECT {select} FROM {side}."{table}" EXCEPT ALL SELECT {select} FROM {other}."{table}"'
        only[side] = con.execute(f"SELECT count(*) FROM ({difference})").fetchone()[0]
        if only[side]:
            rows = con.execute(f"SELECT * FROM ({difference}) ORDER BY ALL LIMIT {show}").fetchall()
            lines += [f"  only in {side.upper()}: {dict(zip(compared, row))}" for row in rows]
    if only["a"] or only["b"] or counts[0] != counts[1]:
        differs = True
        notes.insert(0, f"A {counts[0]} rows, B {counts[1]}; {only['a']} only in A, {only['b']} only in B")
    if differs:
        return False, [f"{table}: DIFFERENT: " + "; ".join(notes)] + lines
    left_out = sorted(c for t, c in ignored if t == table and (c in a_columns or c in b_columns))
    return True, [f"{table}: same {counts[0]} rows" + (f" (not compared: {', '.join(left_out)})" if left_out else "")]


def compare(a: Path, b: Path, tables: list[str] | None = None, ignore: set[tuple[str, str]] = frozenset(),
            show: int = 5) -> tuple[bool, list[str]]:
    """(all the same, output lines) for warehouses a and b over `tables` (default: all of schema.sql)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    attach(con, Path(a).absolute(), "a")
    attach(con, Path(b).absolute(), "b")
    ignored = LEGITIMATELY_DIFFERENT | set(ignore)
    same, out = True, []
    for table in tables or list(schema_tables()):
        table_same, lines = compare_table(con, table, ignored, show)
        same &= table_same
        out += lines
    con.close()
    return same, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="warehouse A (e.g. before)")
    parser.add_argument("b", type=Path, help="warehouse B (e.g. after)")
    parser.add_argument("--tables", help="comma-separated tables (default: every table of schema.sql)")
    parser.add_argument("--ignore", action="append", default=[], metavar="TABLE.COLUMN",
                        help="also leave this column out (repeatable)")
    parser.add_argument("--show", type=int, default=5, help="differing rows shown per side and table")
    args = parser.parse_args(argv)
    ignore = set()
    for item in args.ignore:
        if not re.fullmatch(r"\w+\.\w+", item):
            parser.error(f"--ignore {item}: expected TABLE.COLUMN")
        ignore.add(tuple(item.split(".")))
    for root in (args.a, args.b):
        if not root.is_dir():
            parser.error(f"{root}: not a folder")
    same, lines = compare(args.a, args.b, args.tables.split(",") if args.tables else None, ignore, args.show)
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
