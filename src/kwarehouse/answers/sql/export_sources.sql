-- kwh export: the tables and views a source may name (the warehouse's tables are views over Parquet).
SELECT table_name FROM information_schema.tables
