"""Every queries/ file runs on a warehouse of the test exports and returns rows where it should."""

from pathlib import Path

import pytest

QUERIES = sorted((Path(__file__).parent.parent / "queries").glob("*.sql"))


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.stem)
def test_query_runs(ingested, path):
    text = path.read_text()
    assert text.startswith("-- "), "first line must describe the query"
    result = ingested.connect().execute(text).fetchall()
    if path.stem in ("kernels_per_model", "top_rules", "metric_lookup", "most_popular_kernels",
                     "how_kernels_perform", "gemm_shapes_vs_performance", "systemic_weaknesses",
                     "stall_reasons_by_op_class", "framework_op_cost"):
        assert result
