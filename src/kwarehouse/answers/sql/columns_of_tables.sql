-- kwh mcp list_views: every table and view of the connection with its columns and their types, in column order.
SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE NOT internal ORDER BY table_name, column_index
