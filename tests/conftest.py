from __future__ import annotations

import csv
import fcntl
import math
import os
import pickle
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kwarehouse import schema
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store.warehouse import Warehouse

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"
# tests/data folders that hold good exports (bad/ and kernel-names/ do not)
EXPORT_FOLDERS = ("ncu-", "nsys-", "torch-trace-")


# How the tests' local Spark starts: the parity tests run ~100 small queries over a few MB, where the JVM's
# optimising JIT, whole-stage code generation (Janino compiles each plan) and adaptive re-planning cost far
# more CPU than they save, as do tasks: one partition per scan and per shuffle (test_spark.py: ~130 CPU-s of
# the JVM without these, ~45 with). The SQL's meaning is the same either way; a user's sessions keep Spark's
# defaults (kwarehouse.spark.LOCAL_CONF).
TEST_SPARK_SUBMIT_ARGS = ("--driver-java-options '-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC'"
                          " --conf spark.sql.codegen.wholeStage=false --conf spark.sql.codegen.factoryMode=NO_CODEGEN"
                          " --conf spark.sql.adaptive.enabled=false --conf spark.sql.files.minPartitionNum=1"
                          " --conf spark.sql.constraintPropagation.enabled=false pyspark-shell")


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/*.csv")


def pytest_configure(config):
    # before any test starts the JVM (pyspark reads it then); a developer's own setting wins
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", TEST_SPARK_SUBMIT_ARGS)
    # kwh keeps its views template in a cache folder, made once per machine (store/template.py): the suite
    # has one of its own, which every kwh process it starts shares, and removes it when it ends
    if "KWH_CACHE_DIR" not in os.environ:
        config.kwh_cache_dir = tempfile.mkdtemp(prefix="kwh-test-cache-")
        os.environ["KWH_CACHE_DIR"] = config.kwh_cache_dir


# Fixtures made once per catalog backend ("sqlite", "postgresql"). A test of kwh's store and catalog
# (tests/store/, or marked `catalog`) runs on both by default; elsewhere the PostgreSQL twin re-tests code
# that does not touch the catalog's dialect (a view, a reader, a rollup's numbers) through the same
# SQLAlchemy calls as the SQLite one, for ~1 CPU-s of server time each: it runs with -m slow.
CATALOG_BACKEND_FIXTURES = ("new_warehouse", "cupy")
STORE_TESTS = Path(__file__).parent / "store"


@pytest.hookimpl(tryfirst=True)       # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_postgresql = any(params.get(name) == "postgresql" for name in CATALOG_BACKEND_FIXTURES)
        about_the_catalog = item.get_closest_marker("catalog") or STORE_TESTS in item.path.parents
        if on_postgresql and not about_the_catalog:
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config):
    if getattr(config, "kwh_cache_dir", None):
        shutil.rmtree(config.kwh_cache_dir, ignore_errors=True)
        del os.environ["KWH_CACHE_DIR"]


@pytest.fixture
def cache_folder(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own (KWH_CACHE_DIR), not made yet: what kwh keeps per machine
    (kwarehouse.cache) starts empty."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("KWH_CACHE_DIR", str(folder))
    return folder


def rows(warehouse: Warehouse, sql: str, params=()) -> list[tuple]:
    """The rows of a query over a warehouse, through a fresh kwh connection."""
    con = warehouse.connect()
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A PostgreSQL server for the session, or a skip when its binaries or driver are missing."""
    import postgres
    if postgres.binaries() is None:
        pytest.skip("PostgreSQL binaries not installed (scripts/test.sh installs the Debian package)")
    pytest.importorskip("psycopg")
    # not under pytest's tmp folder: that is private to root, and the server runs as another user
    base = Path(tempfile.mkdtemp(prefix="kwh-pg-"))
    server = postgres.Server(base)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the whole session (its JVM takes ~5 CPU-s to start), or a skip without pyspark or Java."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17 (Debian: openjdk-17-jre-headless)")
    from kwarehouse import spark as kspark
    session = kspark.local_session(cores=2, app_name="kwh-tests")
    session.sparkContext.setLogLevel("ERROR")
    # LOCAL_CONF's 4 would win over PYSPARK_SUBMIT_ARGS: set on the shared session (newSession()s keep 4)
    session.conf.set("spark.sql.shuffle.partitions", "1")
    yield session


def warehouse_on(backend: str, root: Path, request) -> Warehouse:
    """A new warehouse at root whose catalog is catalog.sqlite in it ("sqlite") or a fresh database
    on the test PostgreSQL server ("postgresql")."""
    if backend == "sqlite":
        return Warehouse(root)
    return Warehouse(root, request.getfixturevalue("postgres_server").new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def new_warehouse(request, tmp_path):
    """Makes warehouses under tmp_path with each catalog backend in turn: catalog.sqlite in the
    warehouse, or a fresh database on the test PostgreSQL server."""
    def make(name: str = "wh") -> Warehouse:
        return warehouse_on(request.param, tmp_path / name, request)
    return make


@pytest.fixture
def warehouse(new_warehouse) -> Warehouse:
    return new_warehouse()


def built_once(tmp_path_factory, name: str, build) -> Path:
    """A folder that build(folder) fills once per test session. Under pytest-xdist every worker is a
    process with session fixtures of its own, and with --dist loadfile both workers usually need the ones
    below (seconds of CPU each): the first to ask builds the folder in the session's shared temporary
    folder while the other waits on a lock, then reads the same one. Only for what tests just read."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    shared = tmp_path_factory.getbasetemp().parent      # the session's; each worker's base is below it
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():                           # or a worker whose build failed left it half made
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def pristine_warehouse(tmp_path_factory) -> Path:
    """Every good test export ingested once per session (tests get copies)."""
    def build(folder: Path) -> None:
        sources = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
        report = ingest_job.ingest(sources, Warehouse(folder / "wh"))
        assert report.failed == []
    return built_once(tmp_path_factory, "pristine", build) / "wh"


@pytest.fixture
def ingested(pristine_warehouse, tmp_path) -> Warehouse:
    """A warehouse holding every good test export: a private copy the test may change."""
    root = tmp_path / "wh"
    shutil.copytree(pristine_warehouse, root)
    warehouse = Warehouse(root)
    warehouse.refresh_duckdb()   # its views name the files of the copy
    return warehouse


@pytest.fixture(scope="session")
def ingested_read_only(pristine_warehouse, tmp_path_factory) -> Warehouse:
    """The warehouse of `ingested`, one copy for the whole session: only for tests that just query it
    (the golden views and the queries/ files), which would otherwise each copy and republish it."""
    def build(folder: Path) -> None:
        shutil.copytree(pristine_warehouse, folder / "wh")
        Warehouse(folder / "wh").refresh_duckdb()
    return Warehouse(built_once(tmp_path_factory, "read-only", build) / "wh")


@pytest.fixture(scope="session")
def read_only_view_rows(ingested_read_only, tmp_path_factory) -> dict[str, tuple[list[str], list[tuple]]]:
    """Every view of ingested_read_only, each queried once for the session: {view: (columns, rows)}.
    The golden view checks and the compaction check read them (one pass over the views costs ~5 CPU-s)."""
    from kwarehouse import views

    def build(folder: Path) -> None:
        con = ingested_read_only.connect()
        try:
            out = {}
            for name in views.all_views():
                cursor = con.execute(f'SELECT * FROM "{name}"')
                out[name] = ([d[0] for d in cursor.description], cursor.fetchall())
        finally:
            con.close()
        (folder / "rows.pickle").write_bytes(pickle.dumps(out))
    return pickle.loads((built_once(tmp_path_factory, "read-only-view-rows", build) / "rows.pickle").read_bytes())


SHARED_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
# the corpora of ../shared/corpus: one folder of tarballs (one report each) per corpus
CORPORA = ("h100-2026-11", "h100-2026-11b")


@pytest.fixture(scope="session")
def whole_corpus(tmp_path_factory):
    """Both corpora of ../shared extracted (runs/<corpus>/<model>/) and ingested once, in one batch, into one
    warehouse with the SQLite catalog: (runs folder, warehouse, the ingest's report). Several modules check
    the whole corpus (verdicts, the report, no fallback); each ingest of it costs ~20 CPU-s, so they share
    this one and only read it. Skips without ../shared/corpus."""
    if not all((SHARED_CORPUS / name).is_dir() for name in CORPORA):
        pytest.skip("../shared/corpus not present")

    def build(base: Path) -> None:
        for name in CORPORA:
            target = base / "runs" / name
            target.mkdir(parents=True)
            for tarball in sorted((SHARED_CORPUS / name).glob("*.tar.xz")):
                subprocess.run(["tar", "xJf", str(tarball), "-C", str(target)], check=True)
        report = ingest_job.ingest([base / "runs"], Warehouse(base / "wh"))
        (base / "report.pickle").write_bytes(pickle.dumps(report))
    base = built_once(tmp_path_factory, "whole-corpus", build)
    return base / "runs", Warehouse(base / "wh"), pickle.loads((base / "report.pickle").read_bytes())


@pytest.fixture(scope="session")
def whole_corpus_report(whole_corpus, tmp_path_factory) -> str:
    """kwh report of the whole corpus (conftest.whole_corpus), built once: test_report's issue-33 checks
    and test_corpus's sections check read the same page (a corpus report costs ~10 CPU-s)."""
    from kwarehouse.answers import report

    def build(folder: Path) -> None:
        (folder / "report.html").write_text(report.build(whole_corpus[1]), encoding="utf-8")
    return (built_once(tmp_path_factory, "whole-corpus-report", build) / "report.html").read_text(encoding="utf-8")


def warehouse_rows(warehouse: Warehouse) -> dict[str, list[str]]:
    """Every row of every table, sorted, as text: two warehouses holding the same data compare equal
    (ingested_at, the wall-clock time of the ingest, is left out)."""
    con = warehouse.connect()
    out = {}
    for name, spec in schema.tables().items():
        columns = ", ".join(f'"{c}"' for c, _ in spec.sql_types if c != "ingested_at")
        out[name] = sorted(map(repr, con.execute(f"SELECT {columns} FROM {name}").fetchall()))
    return out


def _cell(value) -> str:
    """Golden text of one value: floats to 10 significant digits, because parallel sums may differ
    in the last bits from run to run."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


@pytest.fixture
def golden(request):
    """Compare rows (sorted, as CSV text) with tests/golden/NAME.csv, or rewrite it with --update-golden."""
    def check(name: str, columns: list[str], rows: list[tuple]) -> None:
        path = GOLDEN / f"{name}.csv"
        text = [columns] + sorted([[_cell(v) for v in row] for row in rows])
        if request.config.getoption("--update-golden") or not path.exists():
            GOLDEN.mkdir(exist_ok=True)
            with open(path, "w", newline="", encoding="utf-8") as handle:
                csv.writer(handle, lineterminator="\n").writerows(text)
            if not request.config.getoption("--update-golden"):
                pytest.fail(f"{path} did not exist; written now, check it and commit it")
        with open(path, newline="", encoding="utf-8") as handle:
            expected = list(csv.reader(handle))
        assert text == expected or _same_but_last_digits(text, expected), \
            f"{name} differs from {path}; run pytest --update-golden if intended"
    return check


def _same_but_last_digits(found: list[list[str]], expected: list[list[str]]) -> bool:
    """Whether two golden texts differ only in the last printed digit of some floats: a sum of short decimals
    (ncu's ratios x instruction counts) can land on a rounding boundary of the 10th digit, where the order of
    a parallel sum decides its last bit and so the digit printed."""
    def close(a: str, b: str) -> bool:
        if a == b:
            return True
        try:
            x, y = float(a), float(b)
        except ValueError:
            return False
        return math.isclose(x, y, rel_tol=2e-9)
    return len(found) == len(expected) and all(
        len(f) == len(e) and all(close(a, b) for a, b in zip(f, e)) for f, e in zip(found, expected))
