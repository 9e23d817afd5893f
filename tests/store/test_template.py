"""The views template is made once per machine and trusted only while its bytes hash to what was kept
(store/template.py): a damaged or missing cache, or none to be had, costs time, never a wrong file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import duckdb
import pytest

from kwarehouse.store import template

from conftest import DATA


@pytest.fixture
def cache(cache_folder):
    template.views_template.cache_clear()
    yield cache_folder
    template.views_template.cache_clear()


def _views_in(path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    finally:
        con.close()


def test_the_template_is_made_once_and_then_read_from_the_cache(cache, monkeypatch):
    made = template.views_template()
    assert made.parent == cache and made.name == f"views-{template.key()}.duckdb"
    assert {"design_signals", "what_to_fix_first", "thresholds"} <= _views_in(made)
    template.views_template.cache_clear()
    monkeypatch.setattr(template, "_make", lambda: pytest.fail("made again although the cache holds it"))
    assert template.views_template() == made


def test_a_damaged_cached_template_is_not_used_but_made_again(cache):
    made = template.views_template()
    damaged = bytearray(made.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    made.write_bytes(bytes(damaged))
    template.views_template.cache_clear()
    assert template.views_template() == made
    kept = made.with_suffix(".sha256").read_text()
    assert made.read_bytes() != bytes(damaged) and hashlib.sha256(made.read_bytes()).hexdigest() == kept
    assert "design_signals" in _views_in(made)


def test_without_a_cache_folder_each_process_makes_its_own(cache, monkeypatch):
    blocked = cache.parent / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KWH_CACHE_DIR", str(blocked / "cache"))
    path = template.views_template()
    assert path is not None and blocked not in path.parents
    assert "design_signals" in _views_in(path)


def test_ingests_in_new_processes_share_the_template_and_publish_the_same_views(tmp_path):
    env = {**os.environ, "KWH_CACHE_DIR": str(tmp_path / "cache")}
    run = DATA / "ncu-custom-cupy-h100"
    published = []
    for name in ("first", "second"):
        subprocess.run([sys.executable, "-m", "kwarehouse.cli", "--warehouse", str(tmp_path / name), "ingest",
                        str(run)], check=True, env=env, capture_output=True)
        published.append(_views_in(tmp_path / name / "warehouse.duckdb"))
    assert len(list((tmp_path / "cache").glob("views-*.duckdb"))) == 1
    assert published[0] == published[1] and "design_signals" in published[0]


def test_a_reader_over_a_private_copy_of_the_template_answers_as_the_views_created_in_memory(ingested_read_only):
    """A reader that cannot use warehouse.duckdb reads a private copy of the template over the snapshot's
    files (store/connect.py): every view has the columns and types, and five views (base tables, thresholds, kernel_time, bottleneck_class) the rows, of
    the views created anew in memory (the path it replaced); no copy is left behind."""
    import glob
    import tempfile

    from kwarehouse import views
    from kwarehouse.store import connect
    warehouse = ingested_read_only
    snapshot = warehouse.snapshot()
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "kwh-reader-*")))
    over_template = connect._over_template(warehouse.root, snapshot)
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "kwh-reader-*"))) == before
    anew = connect.views_in_memory(warehouse.root, snapshot)
    try:
        # the template's views bound anew over the snapshot's files, against the in-memory views' columns
        # (bound over those files by create_all)
        bound = {name: [(c, t) for c, t, *_ in over_template.execute(f'DESCRIBE SELECT * FROM "{name}"').fetchall()]
                 for name in views.all_views()}
        created: dict[str, list] = {}
        for name, column, data_type in anew.execute("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                                                    "WHERE database_name = 'memory' ORDER BY column_index").fetchall():
            created.setdefault(name, []).append((column, data_type))
        assert bound == {name: created[name] for name in views.all_views()}
        for name in ("kernels", "runs", "kernel_time", "bottleneck_class", "thresholds"):
            found = [con.execute(f'SELECT * FROM "{name}"').fetchall() for con in (over_template, anew)]
            assert found[0] == found[1] and found[0], name
    finally:
        over_template.close()
        anew.close()
