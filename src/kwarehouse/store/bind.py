"""The one binding of a catalog snapshot to files: which Parquet files make each table, grouped by
the real model/GPU names of folders that abbreviate them (layout.partition_value). DuckDB's views
(view_sql, for connect and publish), the polars frames of kwarehouse.open().table() and Spark's
temporary views (kwarehouse.spark.register) all read a table through table_files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from kwarehouse import normalize, schema
from kwarehouse.store.files import current_schema_mark
from kwarehouse.store.layout import read_path, sql_string


@dataclass(frozen=True)
class Snapshot:
    """What the catalog says at one instant (read in one statement): the committed files of every
    table, relative to the root, and the real model/GPU names of folders that abbreviate them."""
    files: dict[str, list[str]]
    names: dict[tuple[str, str], str]     # (partition column, folder value) -> real value
    generation: int
    # the real (model, gpu) of each run's file (rollup files have none)
    partition_of: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows) -> Snapshot:
        """The snapshot of catalog.SNAPSHOT_QUERY's rows: (path, table, model, gpu, generation)."""
        files: dict[str, list[str]] = {name: [] for name in schema.tables()}
        names: dict[tuple[str, str], str] = {}
        partition_of: dict[str, tuple[str, str]] = {}
        generation = 0
        for path, table, model, gpu, gen in rows:
            if path is None:
                generation = int(gen or 0)
                continue
            if table not in files:
                continue
            files[table].append(path)
            if model is not None and gpu is not None:
                partition_of[path] = (model, gpu)
            parts = Path(path).parts
            for part, real in zip(parts[1:3], (model, gpu)):
                key, _, value = part.partition("=")
                if real is not None and key in ("model", "gpu") and unquote(value) != real:
                    names[(key, value)] = real
        for paths in files.values():
            paths.sort()
        return cls(files, names, generation, partition_of)

    def of_partitions(self, partitions: set[tuple[str, str]]) -> Snapshot:
        """The same snapshot holding only the runs' files of the (model, gpu) `partitions`."""
        files = {table: [p for p in paths if self.partition_of.get(p) in partitions] for table, paths in self.files.items()}
        return Snapshot(files, self.names, self.generation, self.partition_of)


@dataclass(frozen=True)
class FileGroup:
    """Files of one table that read alike: under one table folder (`base`: the _files/ link's, or
    the table folder of a file an older kwh wrote) with the same real partition names (`real`:
    (column, value) pairs, empty where the folder names are the values)."""
    base: Path
    real: tuple[tuple[str, str], ...]
    paths: list[Path]


def table_files(root: Path, snapshot: Snapshot, table: str, existing: bool = True) -> list[FileGroup]:
    """The committed files of `table` in `snapshot`, where readers read them (layout.read_path),
    grouped as FileGroup; files missing on disk are left out unless existing=False (kwh check
    reports them)."""
    groups: dict[tuple[Path, tuple], list[Path]] = {}
    for relative in snapshot.files.get(table, []):
        path = read_path(root, relative)
        if existing and not path.exists():
            continue
        real = tuple(sorted(real_names(Path(relative), snapshot.names).items()))
        base = Path(str(path)[:len(str(path)) - len(relative)] + table)
        groups.setdefault((base, real), []).append(path)
    return [FileGroup(base, real, paths) for (base, real), paths in groups.items()]


def real_names(relative: Path, names: dict[tuple[str, str], str]) -> dict[str, str]:
    """The real model/GPU of a file whose folder abbreviates them ({} for ordinary folders)."""
    out = {}
    for part in relative.parts[1:-1]:
        key, sep, value = part.partition("=")
        if sep and (key, value) in names:
            out[key] = names[(key, value)]
    return out


def view_sql(root: Path, snapshot: Snapshot) -> list[str]:
    """CREATE VIEW statements exposing every table over exactly the committed Parquet files of
    one catalog snapshot. Files that went missing are left out (kwh check reports them)."""
    statements = []
    for name, spec in schema.tables().items():
        groups = table_files(root, snapshot, name)
        columns = ", ".join(f'"{c}"' for c, _ in spec.sql_types)
        typed = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in spec.sql_types)
        if not groups:
            statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {typed} WHERE false')
            continue
        hive_types = ", ".join(f"'{c}': {dict(spec.sql_types)[c]}" for c in spec.partition_columns)
        mark = f".{current_schema_mark(name)}.parquet"
        plain = sorted(f for group in groups if not group.real for f in group.paths)
        current = [f for f in plain if f.name.endswith(mark)]
        older = [f for f in plain if not f.name.endswith(mark)]
        # Files with today's columns are read as one schema: DuckDB then opens only the first
        # file's footer to bind the view. Older files (written before a column was added; kwh
        # renormalize rewrites them) need union_by_name, which reads every footer, on every bind.
        sources = [f"SELECT * FROM read_parquet([{', '.join(sql_string(str(f)) for f in group)}], "
                   f"hive_partitioning = true, union_by_name = {str(by_name).lower()}, "
                   f"hive_types = {{{hive_types}}})"
                   for group, by_name in ((current, False), (older, True)) if group]
        # Files in folders whose names abbreviate the model or GPU (long or odd names) get the
        # real names from the catalog, one read per such folder.
        renamed: dict[Path, tuple[tuple[str, str], ...]] = {}
        for group in groups:
            for f in group.paths:
                if group.real:
                    renamed.setdefault(f.parent, group.real)
        for folder, real in sorted(renamed.items()):
            files = sorted(f for group in groups if group.real for f in group.paths if f.parent == folder)
            replace = ", ".join(f'{sql_string(v)} AS "{k}"' for k, v in real)
            sources.append(f"SELECT * REPLACE ({replace}) FROM read_parquet("
                           f"[{', '.join(sql_string(str(f)) for f in files)}], hive_partitioning = true, "
                           f"union_by_name = true, hive_types = {{{hive_types}}})")
        if not older and not renamed:
            # Every file has today's columns, in today's types (the writer conforms them to schema.sql):
            # the files are the table as they are. No typed row set to unite them with, which would
            # double the cost of every scan (binding a union of every column: ~4 ms a scan, and a
            # verdict view scans the base tables ~100 times).
            statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {columns} FROM ({sources[0]})')
            continue
        # The empty typed row set first, so old files' missing columns read as NULL of their type.
        statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {columns} FROM '
                          f'(SELECT {typed} WHERE false UNION ALL BY NAME '
                          f'{" UNION ALL BY NAME ".join(sources)})')
    return statements


def add_reference_tables(con) -> None:
    """metric_catalog: every canonical metric with its other names, base unit and meaning;
    gpu_peaks: the published peaks of normalize/gpu_peaks.csv, one row per GPU model and dtype."""
    from kwarehouse.normalize import peaks
    for name, frame in (("metric_catalog", normalize.metric_catalog()), ("gpu_peaks", peaks.peak_frame())):
        con.register(f"{name}_rows", frame.to_arrow())
        con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM "{name}_rows"')
        con.unregister(f"{name}_rows")
