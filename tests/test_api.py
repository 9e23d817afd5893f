"""The Python API (kwarehouse.open), as the README shows it."""

from __future__ import annotations

import polars as pl
from conftest import DATA

import kwarehouse


def test_the_python_api_as_the_readme_shows_it(tmp_path):
    with kwarehouse.open(tmp_path / "wh") as kwh:
        report = kwh.ingest(DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2")
        assert len(report.runs) == 2 and report.failed == []
        by_model = kwh.sql("SELECT model, count(*) AS kernels FROM kernels GROUP BY 1").pl()
        assert by_model.rows() == [("gpt2", 3)]
        assert kwh.sql("SELECT count(*) FROM kernel_popularity").fetchall()[0][0] > 0
        kernels = kwh.table("kernels")
        assert isinstance(kernels, pl.LazyFrame)
        assert kernels.filter(pl.col("model") == "gpt2").select(pl.len()).collect().item() == 3
        assert kwh.table("kernel_launches").filter(pl.col("activity") == "kernel").collect().height == 38
        assert "roofline" in kwh.views()
        # a later ingest is seen by the same object
        kwh.ingest(DATA / "ncu-gtx1080-raw", model="vecadd")
        assert kwh.sql("SELECT count(*) FROM kernels").fetchall() == [(6,)]
        assert kwh.table("kernels").select(pl.len()).collect().item() == 6
        assert kwh.table("runs").select("model").collect()["model"].sort().to_list() == ["gpt2", "gpt2", "vecadd"]


def test_the_polars_frame_shows_the_real_name_of_a_long_model(tmp_path):
    with kwarehouse.open(tmp_path / "wh") as kwh:
        kwh.ingest(DATA / "ncu-gtx1080-raw", model="m" * 150)
        assert kwh.table("kernels").select("model").unique().collect().item() == "m" * 150
