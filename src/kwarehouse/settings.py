"""The tunables of the write path, in one frozen dataclass the caller constructs.

A Warehouse carries its Settings (``Warehouse(root, settings=Settings(batch_runs=1))``); the build
steps, the jobs and the store read them from there, so a test states the setting it needs instead of
patching a module global. The defaults are the measured ones; each field says what measured it.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Settings:
    # Runs of ncu exports are built in one vectorized pass and written together (one Parquet file per
    # table and partition, one catalog transaction), up to this many runs or input bytes at a time:
    # per-run work (a polars query, a file, a transaction) costs more than a 100-kernel run's rows. A
    # batch holds ~6x its input bytes at its peak, and ingest holds up to three (reading, building,
    # committing). Measured on 100 bench runs of 9 MB (issue 35, 2026-11-27), one process: batches
    # bounded by 80 MB (16 runs) 18.6 CPU-s, 11.7 s wall, 803-843 MiB at the peak; by 32 MB (4 runs)
    # 18.1-18.5 CPU-s, 11.5-11.7 s, 537-556 MiB. So the bytes bound them; small runs still go 16 at a
    # time (fewer files per partition before kwh compact).
    batch_runs: int = 16
    batch_bytes: int = 32 << 20
    # A full batch is built and committed in threads while the next folders are read (False: each batch
    # is committed in the calling thread before reading on; the report and the rows are the same either
    # way, tested; bench/profile_ingest.py turns it off, as cProfile sees one thread).
    commit_behind: bool = True
    # kwh renormalize rewrites this many runs per commit.
    renormalize_batch: int = 200
    # Folders go to fan-out workers this many at a time (or up to this many input bytes): the runs of a
    # job are normalized and written together, and jobs stay many enough to balance (the last job of one
    # worker is all the other may wait for) and small enough for a worker's memory.
    job_folders: int = 8
    job_bytes: int = 80 << 20
    # The long metrics table is written sorted by metric name in row groups of this many rows, so that
    # a filter on the name skips most of every file by its row-group statistics.
    clustered_row_group_rows: int = 16_384
    # kwh compact streams each partition through chunks of at most this many rows (sorted per chunk for
    # clustered tables), so its memory does not grow with the partition.
    compact_chunk_rows: int = 1_000_000
    # A replaced file's link under _files/ stays readable this long for views bound before, measured on
    # the catalog's clock.
    retire_grace: timedelta = timedelta(minutes=10)
    # From this many launch rows (kernel_launches + kernels) up, warehouse.duckdb holds the heavy views
    # (views.MATERIALIZED) as tables, and each commit computes only the partitions it changed (the fleet
    # views whole, from those tables; store/materialize.py). Below, views answer in 0.1-1.8 CPU-s, mostly
    # planning (design_signals at 45 bench runs, 4,950 rows: 1.8 CPU-s), which a commit of a small
    # warehouse would pay instead (+0.5-1.3 CPU-s, the fixed cost of a one-file ingest); at 1,000 runs
    # as views they took 20 CPU-s, as tables every view answers in < 0.2 s (bench/RESULTS.md).
    materialize_min_rows: int = 5_000


DEFAULT_SETTINGS = Settings()
