"""The warehouse on disk, one job per module:
layout (the folder's names, partition names, the published-file check: standard library only), lock,
catalog (the catalog database), folders (one folder per catalog), warehouse (Warehouse: the read side,
and writer()), session (WriteSession: stage, commit, compact, remove), files (Parquet writing and row
order), repair, bind (snapshot -> files per table), publish (warehouse.duckdb), connect (a reader's
DuckDB connection), fast_read (the read path without SQLAlchemy, polars or pyarrow) and check (`kwh check`).

Import the module you need (`from kwarehouse.store.warehouse import Warehouse`): this package
re-exports nothing, so importing kwarehouse.store.fast_read stays free of duckdb and SQLAlchemy."""
