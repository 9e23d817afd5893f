"""Issue 18, the roofline: bytes per memory level, the gpu_peaks table in every query surface, and the
roofline view's roofs, limiters and headroom on real exports (tests/data; the corpus where present)."""

from __future__ import annotations

import duckdb
import pytest
from click.testing import CliRunner
from conftest import DATA, rows

import kwarehouse
from kwarehouse import pipeline
from kwarehouse.cli import main
from kwarehouse.normalize import peaks
from kwarehouse.store import Warehouse

TENSOR = DATA / "tensor-ncu-gpt2-h100"    # corpus h100-2026-11b gpt2: hierarchical + tensor roofline sections
CUPY = DATA / "ncu-custom-cupy-h100"      # saxpy, naive SGEMM, a CUB reduction: CUDA-core FLOPs only


@pytest.fixture(scope="module")
def roof_warehouse(tmp_path_factory) -> Warehouse:
    warehouse = Warehouse(tmp_path_factory.mktemp("roofline") / "wh")
    assert pipeline.ingest([TENSOR, CUPY], warehouse).failed == []
    return warehouse


def _one(warehouse: Warehouse, sql: str, params=()) -> dict:
    con = warehouse.connect()
    try:
        cursor = con.execute(sql, list(params))
        found = cursor.fetchall()
        assert len(found) == 1, found
        return dict(zip([d[0] for d in cursor.description], found[0]))
    finally:
        con.close()


# -- gpu_peaks: the published table in every query surface -------------------------------------------

def test_gpu_peaks_in_kwh_sql_and_kwh_query(tmp_path):
    runner = CliRunner()
    warehouse = str(tmp_path / "wh")
    assert runner.invoke(main, ["-w", warehouse, "ingest", str(CUPY)]).exit_code == 0
    result = runner.invoke(main, ["-w", warehouse, "sql", "--csv", "SELECT * FROM gpu_peaks"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == ("gpu_model,dtype,tensor_dense_flops_per_s,cuda_core_flops_per_s,dram_bytes_per_s,"
                        "l2_bytes_per_s,sm_count,boost_clock_hz,source")
    assert len(lines) - 1 == len(peaks.peak_table())
    bf16 = runner.invoke(main, ["-w", warehouse, "sql", "--csv", "SELECT tensor_dense_flops_per_s FROM gpu_peaks "
                                "WHERE gpu_model = 'H100 SXM' AND dtype = 'bf16'"])
    assert float(bf16.output.splitlines()[1]) == 989.5e12
    assert runner.invoke(main, ["-w", warehouse, "query", "gpu_peaks", "--limit", "1"]).exit_code == 0


def test_gpu_peaks_in_the_python_api_and_warehouse_duckdb(tmp_path):
    with kwarehouse.open(tmp_path / "wh") as kwh:
        kwh.ingest(CUPY)
        assert kwh.sql("SELECT count(*) FROM gpu_peaks").fetchall() == [(len(peaks.peak_table()),)]
        kwh.warehouse.refresh_duckdb()
        con = duckdb.connect(str(kwh.warehouse.duckdb_path), read_only=True)
        try:
            assert con.execute("SELECT sm_count FROM gpu_peaks WHERE gpu_model = 'H100 SXM' AND dtype = 'fp32'"
                               ).fetchall() == [(132.0,)]
        finally:
            con.close()


# -- bytes per memory level ---------------------------------------------------------------------------

def test_bytes_per_level_from_the_hierarchical_roofline_metrics(roof_warehouse):
    """This raw page (corpus 11b) has ncu's rates only: bytes = rate x duration for DRAM, L2 and L1; the
    L2 and L1 peaks are ncu's bytes per cycle x the clock it measured (5,120 B and 16,896 B per cycle
    on the H100)."""
    gemm = _one(roof_warehouse, "SELECT * FROM kernels WHERE model = 'gpt2' AND launch_id = 10")
    metric = {name: value for name, value in rows(roof_warehouse, (
        "SELECT metric, value FROM metrics WHERE model = 'gpt2' AND launch_id = 10 AND metric IN ("
        "'dram__bytes.sum.per_second', 'derived__lts__lts2xbar_bytes.sum.per_second', "
        "'derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second', 'lts__cycles_elapsed.avg.per_second', "
        "'l1tex__cycles_elapsed.avg.per_second')"))}
    seconds = gemm["duration_ns"] * 1e-9
    assert gemm["dram_bytes"] == pytest.approx(metric["dram__bytes.sum.per_second"] * seconds)
    assert gemm["l2_bytes"] == pytest.approx(metric["derived__lts__lts2xbar_bytes.sum.per_second"] * seconds)
    assert gemm["l1_bytes"] == pytest.approx(
        metric["derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second"] * seconds)
    assert gemm["peak_l2_bytes_per_s"] == pytest.approx(5120 * metric["lts__cycles_elapsed.avg.per_second"])
    assert gemm["peak_l1_bytes_per_s"] == pytest.approx(16896 * metric["l1tex__cycles_elapsed.avg.per_second"])
    # the weights [768, 768] bf16 and activations [1024, 768] in, [1024, 768] out: ~3.1 MB compulsory;
    # DRAM moves about that, L2 serves each tile to the SMs several times
    assert 2.5e6 < gemm["dram_bytes"] < 6e6 and gemm["l2_bytes"] > gemm["dram_bytes"]
    assert gemm["shared_bytes"] is None     # smsp__sass_data_bytes_mem_shared not collected
    saxpy = _one(roof_warehouse, "SELECT * FROM kernels WHERE kernel_name = 'saxpy'")
    assert saxpy["dram_bytes"] > 1.8e8 and saxpy["l2_bytes"] is None and saxpy["peak_l2_bytes_per_s"] is None
