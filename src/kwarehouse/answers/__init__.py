"""The answers kwh gives from a warehouse: summary, report, diff, export and the SQL shell.

They read (through kwarehouse.store.warehouse) and never hold the writer lock; their SQL lives in sql/,
one query per file, loaded by queries.py."""
