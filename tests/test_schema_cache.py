"""schema.tables() types schema.sql through DuckDB once per machine, not once per process: the answer is
kept in the cache folder and read back only where it is intact and made for this schema.sql, schema.py,
DuckDB and pyarrow; anything else (damaged, another key's, no folder to be had) types them again."""

from __future__ import annotations

import pytest

from kwarehouse import schema


@pytest.fixture
def cache(cache_folder):
    schema.tables.cache_clear()
    yield cache_folder
    schema.tables.cache_clear()


def _typed() -> dict:
    return schema._typed_by_duckdb()


def _not_again(monkeypatch):
    def refuse():
        raise AssertionError("typed again although the cache holds them")
    monkeypatch.setattr(schema, "_typed_by_duckdb", refuse)


def test_the_tables_are_typed_once_and_then_read_from_the_cache(cache, monkeypatch):
    made = schema.tables()
    kept = list(cache.glob("schema-*.json"))
    assert len(kept) == 1 and made == _typed()
    schema.tables.cache_clear()
    _not_again(monkeypatch)
    read = schema.tables()
    assert read == made and list(read) == list(made)
    assert read["runs"].arrow.field("tags").type == made["runs"].arrow.field("tags").type
    assert read["kernels"].not_null == made["kernels"].not_null and read["kernels"].sql_types == made["kernels"].sql_types


@pytest.mark.parametrize("damage", ["cut", "garbage", "other key", "a table missing"])
def test_a_damaged_or_foreign_cache_file_is_typed_again(cache, damage):
    schema.tables()
    (kept,) = cache.glob("schema-*.json")
    text = kept.read_text()
    kept.write_text({"cut": text[: len(text) // 2], "garbage": "\x00not json",
                     "other key": text.replace(kept.stem.removeprefix("schema-"), "0" * 24, 1),
                     "a table missing": text.replace('"name": "rules"', '"name": "rulez"', 1)}[damage])
    schema.tables.cache_clear()
    assert schema.tables() == _typed()


def test_without_a_cache_folder_the_tables_are_typed_each_time(cache, monkeypatch):
    blocker = cache.parent / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KWH_CACHE_DIR", str(blocker / "cache"))
    assert schema.tables() == _typed()
