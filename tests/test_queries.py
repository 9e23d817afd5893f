"""Every queries/ file runs on a warehouse of the test exports and returns rows where it should."""

from pathlib import Path

import pytest

QUERIES = sorted((Path(__file__).parent.parent / "queries").glob("*.sql"))


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.stem)
def test_query_runs(ingested_read_only, path):
    text = path.read_text()
    assert text.startswith("-- "), "first line must describe the query"
    result = ingested_read_only.connect().execute(text).fetchall()
    if path.stem in ("kernels_per_model", "top_rules", "metric_lookup", "most_popular_kernels",
                     "how_kernels_perform", "gemm_shapes_vs_performance", "systemic_weaknesses",
                     "stall_reasons_by_op_class", "framework_op_cost"):
        assert result


def test_how_kernels_perform_has_a_column_for_every_class_and_they_add_up(ingested):
    path = Path(__file__).parent.parent / "queries" / "how_kernels_perform.sql"
    cursor = ingested.connect().execute(path.read_text())
    columns = [d[0] for d in cursor.description]
    shares = [i for i, c in enumerate(columns) if c.endswith("_pct") and c not in ("sm_pct", "memory_pct")]
    for row in cursor.fetchall():
        assert sum(row[i] for i in shares) == pytest.approx(100, abs=0.5), row
