"""The warehouse on disk: the catalog (catalog), the Parquet files and their commit protocol
(warehouse: the Warehouse class), the published warehouse.duckdb (publish), the fast read path
that needs none of duckdb, pyarrow or SQLAlchemy (fast_read) and `kwh check` (check).

Import the module you need (`from kwarehouse.store.warehouse import Warehouse`): this package
re-exports nothing, so importing kwarehouse.store.fast_read stays free of duckdb and SQLAlchemy."""
