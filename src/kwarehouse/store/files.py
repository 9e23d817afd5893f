"""The Parquet files: how a writer stages them (Stager), the row order and row groups they are
written in (clustering), and the file operations of placing them (hard links under _files/).

Ingest writes Parquet with a fast codec; kwh compact rewrites partitions with zstd. The long metrics
table is written sorted by metric name, in small row groups (Settings.clustered_row_group_rows), so a
filter on the name skips most of every file by its row-group statistics: a query for a few of the
~830 metrics per launch (queries/metric_lookup.sql) reads a few percent of the table, not all of it.
The row order is decided here once: the build steps ask in_order() and packed_order() too, so their
batches reach the writer in this order and are not sorted again.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kwarehouse import schema
from kwarehouse.settings import DEFAULT_SETTINGS, Settings
from kwarehouse.store.layout import FILES, partition_value

CLUSTER_ORDER = {"metrics": ("metric", "run_id", "launch_id")}
# Ingest writes Parquet with a fast codec (writing zstd cost more than normalizing a run); kwh compact
# rewrites partitions with zstd, which is smaller on disk.
INGEST_COMPRESSION = "snappy"


@dataclass(frozen=True)
class StagedRun:
    """One run's Parquet files written under a writer's staging folder, waiting for commit_staged."""
    run_id: str
    model: str
    gpu: str
    txn: str
    files: tuple[tuple[str, str], ...]   # (path relative to the staging folder of txn, table)
    stage_dir: str = ""                  # the staging folder of txn (absolute)
    # files that hold rows of several runs staged together (stage_runs): (path, table, their run ids)
    shared: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


class Stager:
    """Writes runs' Parquet files under a staging folder (a writer session's, or the one a fan-out
    worker was given by the driver's session), where no reader sees them; only a WriteSession
    commits them."""

    def __init__(self, session_dir: Path, settings: Settings = DEFAULT_SETTINGS):
        self.session_dir = Path(session_dir)
        self.settings = settings

    def stage_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table]) -> StagedRun:
        """Write one run's Parquet files into the writer's staging folder, where no reader sees them.

        Inside writer(), or in an ingest fan-out worker whose session_dir the driver's writer gave."""
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        staged = []
        for name, table in tables.items():
            table = schema.conform(name, table)
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"{run_id}-{txn}.parquet")
            relative = self.stage(stage, relative, name, table)
            staged.append((relative.as_posix(), name))
        return StagedRun(run_id, model, gpu, txn, tuple(staged), str(stage))

    def stage_runs(self, runs: list[tuple[str, str, str, dict[str, pa.Table]]]) -> list[StagedRun]:
        """stage_run for several runs, (run_id, model, gpu, tables) each, with one Parquet file per
        table and partition: the first StagedRun carries the files (`shared`), all of them commit
        together in one commit_many."""
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        parts: dict[tuple[str, str, str], list[tuple[str, pa.Table]]] = {}
        for run_id, model, gpu, tables in runs:
            for name, table in tables.items():
                parts.setdefault((name, model, gpu), []).append((run_id, table))
        shared = []
        for number, ((name, model, gpu), of_runs) in enumerate(parts.items()):
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"batch-{txn}-{number}.parquet")
            relative = self.stage(stage, relative, name, conformed(name, pa.concat_tables([t for _, t in of_runs])))
            shared.append((relative.as_posix(), name, tuple(sorted({run_id for run_id, _ in of_runs}))))
        return [StagedRun(run_id, model, gpu, txn, (), str(stage), tuple(shared) if number == 0 else ())
                for number, (run_id, model, gpu, _) in enumerate(runs)]

    def stage(self, stage: Path, relative: Path, name: str, table: pa.Table) -> Path:
        """Write `table` under `stage`; returns the file's path relative to the root, which is
        `relative` with the schema mark (see current_schema_mark) when its columns are today's."""
        spec = schema.tables()[name]
        table = table.select(spec.file_schema.names)
        if same_columns(table.schema, spec.file_schema):
            relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        # dictionaries for the text columns only: building one for every number (a dictionary page
        # per column, all its values hashed) cost a fifth of the metrics table's write; kwh compact
        # rewrites the files with every column's dictionary
        text = [f.name for f in table.schema if stored_type(f.type) == pa.string()]
        write_parquet(stage / relative, name, [table], table.schema, self.settings, INGEST_COMPRESSION, dictionary=text)
        return relative

    def stage_chunks(self, stage: Path, relative: Path, name: str, chunks) -> Path:
        """Like stage, for a stream of tables that already have the table's file columns."""
        relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        write_parquet(stage / relative, name, chunks, schema.tables()[name].file_schema, self.settings)
        return relative

    def chunks(self, paths: list[Path], file_schema: pa.Schema):
        """The rows of `paths` with the columns of `file_schema`, as tables of about
        Settings.compact_chunk_rows rows: files are read a row group at a time, so a large compacted
        file never sits in memory whole."""
        pending, rows = [], 0
        for path in paths:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                pending.append(with_columns_of(pa.Table.from_batches([batch]), file_schema))
                rows += batch.num_rows
                if rows >= self.settings.compact_chunk_rows:
                    yield pa.concat_tables(pending)
                    pending, rows = [], 0
        if pending:
            yield pa.concat_tables(pending)

    @staticmethod
    def discard(staged: StagedRun) -> None:
        shutil.rmtree(staged.stage_dir, ignore_errors=True)


def link(root: Path, relative: Path | str) -> bool:
    """Give a file of a table folder its _files/ link (see layout.FILES); False where the file system
    has no hard links (readers then read the table folder path)."""
    target = root / FILES / relative
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            return True
        os.link(root / relative, target)
        return True
    except OSError:
        return False


def detach(root: Path, retired: list[str]) -> None:
    """Take retired files out of their table folders (their _files/ links keep them readable for
    views bound before, until repair deletes them); a file that cannot be linked stays."""
    for path in retired:
        tree = root / path
        if tree.is_file() and not tree.is_symlink() and link(root, path):
            tree.unlink()


@functools.cache
def current_schema_mark(table: str) -> str:
    """A short hash of a table's file columns and types, put in the names of the Parquet files
    written with exactly those columns ("<run>-<txn>.s1a2b3c4d.parquet"), so views can read them
    without opening every file to compare schemas."""
    text = ";".join(f"{f.name}:{f.type}" for f in schema.tables()[table].file_schema)
    return "s" + hashlib.sha256(text.encode()).hexdigest()[:8]


def write_parquet(path: Path, name: str, tables, file_schema: pa.Schema, settings: Settings,
                  compression: str = "zstd", dictionary: bool | list[str] = True) -> None:
    """Write `tables` (an iterable) into one Parquet file (zstd unless told; dictionary: pyarrow's
    use_dictionary); clustered tables (CLUSTER_ORDER) are sorted per table and cut into small row groups."""
    order = CLUSTER_ORDER.get(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # string_view columns (polars' strings handed over without a copy; only in tables of flat strings and
    # numbers) are stored as plain strings, without the Arrow schema that would make pyarrow read them
    # back as views: every reader then sees the file as if it had been written from strings
    views = any(f.type == pa.string_view() for f in file_schema)
    with pq.ParquetWriter(path, file_schema, compression=compression, store_schema=not views,
                          use_dictionary=dictionary) as writer:
        for table in tables:
            indices = cluster_indices(table, order) if order else None
            if indices is not None:
                table = _taken(table, indices)
            writer.write_table(table, row_group_size=settings.clustered_row_group_rows if order else None)


def _taken(table: pa.Table, indices) -> pa.Table:
    """table.take(indices), also for string_view columns, which Arrow's take does not handle: they go
    through plain strings and back. A batch's table comes in order but for one case: two runs of one
    model and GPU in one batch (the corpus's two gpt2 reports), whose rows are ordered run by run."""
    views = [f.name for f in table.schema if f.type == pa.string_view()]
    if not views:
        return table.take(indices)
    plain = pa.schema([f.with_type(pa.string()) if f.name in views else f for f in table.schema])
    return table.cast(plain).take(indices).cast(table.schema)


def in_order(table: pa.Table, order: tuple[str, ...]) -> bool:
    """Whether the rows are sorted by `order` already, ascending, without nulls in those columns (an
    ingest builds its metrics rows so): a comparison of each row with the next, far cheaper than the
    sort and the take it saves. (Arrow's compute, not a polars expression: 57 against 84 ms on 1.5M
    metrics rows, string_view columns included.)"""
    rows = table.num_rows
    if rows < 2:
        return True
    before = equal = None
    for column in order:
        values = table.column(column)
        if values.null_count:
            return False
        this, following = values.slice(0, rows - 1), values.slice(1)
        less, same = pc.less(this, following), pc.equal(this, following)
        before = less if before is None else pc.or_(before, pc.and_(equal, less))
        equal = same if equal is None else pc.and_(equal, same)
    return pc.all(pc.or_(before, equal)).as_py()


def rank(values: pl.Series) -> tuple[pl.Series, int]:
    """(each value's rank among the distinct values, sorted; the bits the ranks take): the key of a
    sort on strings as one small integer. No nulls."""
    distinct = values.unique().sort()
    ranks = values.replace_strict(distinct, pl.int_range(distinct.len(), dtype=pl.Int64, eager=True),
                                  return_dtype=pl.Int64)
    return ranks, max(1, (distinct.len() - 1).bit_length())


def packed_order(keys: list[tuple[pl.Series, int]]) -> pl.Series | None:
    """The row order of a sort by several non-negative integer keys (each with the bits it takes,
    most significant first), as one sort of the keys packed into one integer: a fraction of the cost
    of a multi-column sort on strings. None where they do not fit 63 bits (sort another way)."""
    if sum(width for _, width in keys) > 63:
        return None
    packed = None
    for values, width in keys:
        packed = values if packed is None else packed * (1 << width) + values
    return pl.DataFrame({"_key": packed}).with_row_index("_row").sort("_key", maintain_order=True)["_row"]


def cluster_indices(table: pa.Table, order: tuple[str, ...]):
    """The row order of table.sort_by(order), ascending, or None when the rows have it already:
    each key column is replaced by its rank (rank, packed_order); Arrow's sort where the ranks do not
    fit 63 bits or a key has nulls."""
    if in_order(table, order):
        return None
    if any(table.column(column).null_count for column in order):
        return pc.sort_indices(table, [(c, "ascending") for c in order])
    keys = pl.from_arrow(table.select(list(order)))
    packed = packed_order([rank(keys[column]) for column in order])
    if packed is None:
        return pc.sort_indices(table, [(c, "ascending") for c in order])
    return packed.to_arrow()


def conformed(name: str, table: pa.Table) -> pa.Table:
    """schema.conform, skipped (but for its NULL check) where the table has the exact columns already."""
    spec = schema.tables()[name]
    if not same_columns(table.schema, spec.arrow) or any(table.column(c).null_count for c in spec.not_null):
        return schema.conform(name, table)
    return table


def same_columns(one: pa.Schema, other: pa.Schema) -> bool:
    """Same names and types, string_view counting as string (it is written as one: see write_parquet)."""
    return one.names == other.names and all(stored_type(a.type) == stored_type(b.type) for a, b in zip(one, other))


def stored_type(arrow_type: pa.DataType) -> pa.DataType:
    return pa.string() if arrow_type == pa.string_view() else arrow_type


def with_partitions(table: pa.Table, relative: Path, real: dict[str, str] | None = None) -> pa.Table:
    """Add the hive partition columns a Parquet file's directory names (relative to the root) carry;
    `real` gives the real values of those a folder name abbreviates."""
    spec = schema.tables()[relative.parts[0]]
    for part in relative.parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            if key in spec.partition_columns:
                field = spec.arrow.field(key)
                column = pa.array([(real or {}).get(key, unquote(value))] * table.num_rows, pa.string())
                table = table.append_column(key, column.cast(field.type) if field.type != pa.string() else column)
    return table


def with_columns_of(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `target`: a file written before a column was added to the
    schema gets it as nulls (`kwh renormalize` then fills it)."""
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in target]
    return pa.table({f.name: c for f, c in zip(target, columns)})

