"""kwarehouse: a Parquet warehouse for CUDA kernel analytics.

    import kwarehouse
    kwh = kwarehouse.open("warehouse")     # see kwarehouse.api
"""

from kwarehouse.errors import InputError, KwhError

__version__ = "0.1.0"
__all__ = ["InputError", "KwhError", "__version__", "open"]


def open(path="warehouse", catalog=None):   # noqa: A001 - kwarehouse.open reads as the verb it is
    """The warehouse at `path` (catalog: its catalog URL when not catalog.sqlite inside it)."""
    from kwarehouse.api import open_warehouse   # duckdb and polars load only when used
    return open_warehouse(path, catalog)
