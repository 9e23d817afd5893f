"""Analytics views: one .sql file per view (file name = view name, first comment = description)."""
