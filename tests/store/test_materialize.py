"""The materialized views of warehouse.duckdb (store/materialize.py) hold exactly their definitions'
rows, in their order, after every commit, while a commit computes only the (model, gpu) partitions
whose files it changed; a partition that cannot be computed leaves its views as views."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa

from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.settings import Settings
from kwarehouse.store import bind
from kwarehouse.store.catalog import catalog_info
from kwarehouse.store.layout import read_path
from kwarehouse.store.materialize import PARTITIONS_KEY
from kwarehouse.store.warehouse import Warehouse

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples" / "runs"


def _bench_module():
    """bench/materialized_views.py, whose --compare (views_afresh, same_rows) the test shares."""
    spec = importlib.util.spec_from_file_location("materialized_views", ROOT / "bench" / "materialized_views.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_bench = _bench_module()
same_rows = _bench.same_rows


def _assert_tables_hold_their_views(warehouse: Warehouse) -> None:
    published = warehouse.connect()
    expected = _bench.views_afresh(warehouse)
    # Computed whole from the catalog's files, each view in creation order over the tables of those before
    # it (what a first publish computes): a view queried cold inlines every view below it, ~6 CPU-s for all
    # of them at each step here. That those tables hold exactly their views' rows is
    # test_real_time.py::test_materialized_views_hold_exactly_the_rows_of_their_definitions.
    assert views.materialize(expected, views.MATERIALIZED) == []
    try:
        tables = {name for (name,) in published.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert set(views.MATERIALIZED) <= tables
        for name in views.MATERIALIZED:
            got = published.execute(f'SELECT * FROM "{name}"').fetchall()
            want = expected.execute(f'SELECT * FROM "{name}"').fetchall()
            assert same_rows(got, want), name
            if name in views.PARTITION_LOCAL:       # every row belongs to a partition
                assert published.execute(f'SELECT count(*) FROM "{name}" WHERE model IS NULL OR gpu IS NULL'
                                         ).fetchall()[0][0] == 0, name
            order = views.row_order(views.all_views()[name])
            if order:       # stored in the view's own order (kwh query --limit takes the first rows)
                unsorted = published.execute(
                    f'SELECT count(*) FROM (SELECT rowid AS stored, row_number() OVER (ORDER BY {order}, rowid) - 1 '
                    f'AS sorted FROM "{name}") WHERE stored <> sorted').fetchall()[0][0]
                assert unsorted == 0, name
    finally:
        published.close()
        expected.close()


def _partitions(warehouse: Warehouse) -> dict:
    with warehouse.reader.connect() as con:
        text = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == PARTITIONS_KEY)).scalar()
    return json.loads(text) if text else {}


@pytest.fixture
def computed(monkeypatch) -> list[set]:
    """The partitions each publish computed (the snapshots it restricted to them)."""
    seen: list[set] = []
    restrict = bind.Snapshot.of_partitions

    def spy(self, partitions):
        seen.append(set(partitions))
        return restrict(self, partitions)
    monkeypatch.setattr(bind.Snapshot, "of_partitions", spy)
    return seen


def _split_gpt2(tmp_path) -> tuple[Path, Path]:
    """examples/runs/gpt2 as two folders: its ncu pages, and its torch trace (the same model and GPU)."""
    pages, trace = tmp_path / "gpt2-ncu", tmp_path / "gpt2-trace"
    for folder, names in ((pages, ("gpt2.raw.csv", "gpt2.details.csv", "manifest.ncu.json", "ncu_version.txt")),
                          (trace, ("trace.json", "manifest.torchprof.json"))):
        folder.mkdir()
        for name in names:
            (folder / name).write_bytes((EXAMPLES / "gpt2" / name).read_bytes())
    return pages, trace


def test_each_commit_computes_only_the_partitions_it_changed(tmp_path, computed):
    pages, trace = _split_gpt2(tmp_path)
    warehouse = Warehouse(tmp_path / "wh", settings=Settings(materialize_min_rows=0))
    ingest_job.ingest([pages, EXAMPLES / "custom_cupy"], warehouse)
    first = _partitions(warehouse)
    assert {json.loads(key)[0] for key in first} == {"gpt2", "custom_cupy"}
    _assert_tables_hold_their_views(warehouse)
    gpu = json.loads(next(iter(first)))[1]

    computed.clear()
    ingest_job.ingest([trace], warehouse)         # gpt2's timeline: its kernels' real time changes
    assert computed == [{("gpt2", gpu)}]
    _assert_tables_hold_their_views(warehouse)

    computed.clear()
    ingest_job.ingest([EXAMPLES / "resnet18"], warehouse)                    # a new partition
    assert computed == [{("resnet18", gpu)}]
    after = _partitions(warehouse)
    assert after.keys() - first.keys() == {json.dumps(["resnet18", gpu])}
    assert after[json.dumps(["custom_cupy", gpu])] == first[json.dumps(["custom_cupy", gpu])]
    _assert_tables_hold_their_views(warehouse)

    computed.clear()
    warehouse.refresh_duckdb()          # nothing changed: nothing computed
    assert computed == [] and _partitions(warehouse) == after

    # a catalog that lost the record of what the tables hold: every partition computed again
    with warehouse.engine.begin() as con:
        con.execute(catalog_info.delete().where(catalog_info.c.key == PARTITIONS_KEY))
    ingest_job.ingest([EXAMPLES / "llama"], warehouse)
    assert computed == [] and len(_partitions(warehouse)) == 4
    _assert_tables_hold_their_views(warehouse)


def test_a_local_view_reads_only_local_views():
    """What a partition-local view reads must be partition-local too, or its kept rows would go stale when
    another partition changes (the two reads allowed are by their own columns: views.LOCAL_READS_OF_FLEET)."""
    assert "FROM bottleneck_thresholds" in views.all_views()["thresholds"].sql       # thresholds reads no run
    for name in views.PARTITION_LOCAL:
        for read in views.reads(views.all_views()[name]) - {"thresholds"}:
            assert read in views.PARTITION_LOCAL or (name, read) in views.LOCAL_READS_OF_FLEET, (name, read)
    assert not set(views.PARTITION_LOCAL) & set(views.FLEET)


def test_no_materialized_view_reads_the_rollups():
    """A commit that changed no run's files (kwh rollup) recomputes nothing: no view it keeps reads them."""
    for name in views.MATERIALIZED:
        assert "rollup_" not in views.all_views()[name].sql, name


def test_a_partition_that_cannot_be_read_leaves_its_views_as_views(tmp_path):
    warehouse = Warehouse(tmp_path / "wh", settings=Settings(materialize_min_rows=0))
    ingest_job.ingest([EXAMPLES / "gpt2", EXAMPLES / "custom_cupy"], warehouse)
    gpt2 = sorted(path for path, (model, _) in warehouse.snapshot().partition_of.items() if model == "gpt2")
    # damaged on disk (a file after the first of its table: views bind over the first file's footer) ...
    kernels = next(path for path in gpt2 if path.startswith("kernels/"))
    read_path(warehouse.root, kernels).write_bytes(b"not parquet")
    # ... in a partition that changed (a file went missing)
    gone = next(path for path in gpt2 if path.startswith("kernel_launches/"))
    for link in {read_path(warehouse.root, gone), warehouse.root / gone}:
        link.unlink()
    warehouse.refresh_duckdb()
    con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)     # (readers answer from the catalog now)
    try:
        kinds = dict(con.execute("SELECT view_name, 'view' FROM duckdb_views() UNION ALL "
                                 "SELECT table_name, 'table' FROM duckdb_tables()").fetchall())
        assert kinds["bottleneck_class"] == "view"
        with pytest.raises(duckdb.Error, match="not parquet|Parquet"):      # its query says which file
            con.execute("SELECT * FROM bottleneck_class").fetchall()
    finally:
        con.close()
    assert _partitions(warehouse) == {}      # the next commit computes every partition again
