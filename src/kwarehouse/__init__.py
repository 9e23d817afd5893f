"""kwarehouse: a Parquet warehouse for CUDA kernel analytics."""

from kwarehouse.errors import InputError, KwhError

__version__ = "0.1.0"
__all__ = ["InputError", "KwhError", "__version__"]
