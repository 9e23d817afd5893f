"""The Python API from several threads, across commits, and after the warehouse moved or lost a file:
each thread gets its own connection, a commit never closes a connection another thread is using, and
a moved warehouse or a missing Parquet file is an error in sql() and table() alike, never an empty
or short answer."""

from __future__ import annotations

import re
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import polars as pl
import pytest
from conftest import DATA

import kwarehouse
from kwarehouse.store import layout
from kwarehouse.errors import KwhError


@pytest.fixture
def api(tmp_path):
    kwh = kwarehouse.open(tmp_path / "wh")
    assert kwh.ingest(DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2").failed == []
    yield kwh
    kwh.close()


# 40 queries keep each of the four threads busy beside the others (~2 CPU-s); the soak variant's 200 (~11
# CPU-s: a kernel_popularity query is planned each time) runs with -m soak
@pytest.mark.parametrize("queries", [40, pytest.param(200, marks=pytest.mark.soak)])
def test_four_threads_query_one_warehouse_object(api, queries):
    def query(number: int) -> int:
        if number % 2:
            return api.sql("SELECT count(*) FROM kernels").fetchall()[0][0]
        return api.sql("SELECT count(*) AS n FROM kernel_popularity").pl().height

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(query, range(queries)))
    assert answers.count(3) == answers.count(1) == queries // 2


def test_a_commit_never_closes_a_connection_another_thread_is_using(api):
    failures: list[str] = []
    seen: set[int] = set()
    done = threading.Event()

    def reader():
        while not done.is_set():
            try:
                relation = api.sql("SELECT count(*) FROM kernels")
                seen.add(relation.fetchall()[0][0])
                seen.add(api.table("kernels").select(pl.len()).collect().item())
            except Exception as exc:   # noqa: BLE001 - every failure is the finding
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert api.ingest(DATA / "ncu-gtx1080-raw", model="vecadd").failed == []
        assert api.ingest(DATA / "ncu-custom-cupy-h100").failed == []
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert seen <= {3, 6, 10} and 3 in seen
    assert api.sql("SELECT count(*) FROM kernels").fetchall() == [(10,)]


def test_a_relation_taken_before_a_commit_still_answers(api):
    before = api.sql("SELECT count(*) FROM kernels")
    api.ingest(DATA / "ncu-gtx1080-raw", model="vecadd")
    assert api.sql("SELECT count(*) FROM kernels").fetchall() == [(6,)]
    assert before.fetchall() == [(3,)]          # its own snapshot, not a closed connection


def test_a_moved_warehouse_is_an_error_in_sql_and_table(api, tmp_path):
    assert api.table("kernels").select(pl.len()).collect().item() == 3
    shutil.move(tmp_path / "wh", tmp_path / "moved")
    for call in (lambda: api.sql("SELECT count(*) FROM kernels").fetchall(),
                 lambda: api.table("kernels").collect()):
        with pytest.raises(KwhError, match=r"wh: no warehouse here any more \(moved or deleted\?\)"):
            call()
    # in another thread too, which has no connection yet
    with ThreadPoolExecutor(1) as pool, pytest.raises(KwhError, match="no warehouse here any more"):
        pool.submit(lambda: api.table("kernels").collect()).result()
    moved = kwarehouse.open(tmp_path / "moved")
    assert moved.table("kernels").select(pl.len()).collect().item() == 3
    moved.close()


def test_a_missing_parquet_file_is_an_error_in_sql_and_table(api):
    root = api.warehouse.root
    lost = api.warehouse.snapshot().files["kernels"][0]
    for place in (root / lost, root / layout.FILES / lost):
        place.unlink()
    for call in (lambda: api.sql("SELECT count(*) FROM kernels").fetchall(),
                 lambda: api.table("kernels").collect()):
        with pytest.raises(KwhError, match=rf"are missing \(first: {re.escape(lost)}\).*kwh check --repair"):
            call()
    with ThreadPoolExecutor(1) as pool, pytest.raises(KwhError, match="missing"):
        pool.submit(lambda: api.sql("SELECT count(*) FROM runs").fetchall()).result()
