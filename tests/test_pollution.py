"""The pollution suite (issue 31, part 3): polluted variants of real exports must each be read intact
or refused with one line naming the file, never lose data or crash, and never cost the clean export
ingested beside them. tests/pollution.py makes the variants and defines the verdicts;
`python bench/pollution.py` scores every variant of every real export (bench/RESULTS.md).

Variants that lose data or crash on today's readers are strict xfails (KNOWN_LOST, with what the
score found): when a reader is fixed the xfail passes, the test fails, and the entry is removed.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import pollution
from pollution import Damage, Harness, Variant

# One real export per format, and the variants the fast run tries on each.
FAST = {
    "tests/data/meta-ncu-log-gpt2-h100/gpt2.raw.csv":
        ("cut-mid-row", "stderr-between-rows", "stderr-mid-row", "bom", "na-cells", "extra-column",
         "header-repeated", "gzip-truncated", "non-utf8-file-name", "duplicated-column", "localized-1 234,5",
         "non-utf8-in-name"),
    "tests/data/ncu-cupy-h100-stdout/details.csv": ("cut-mid-line", "unseen-rule-text", "na-cells",
                                                    "mixed-line-endings", "stderr-mid-row"),
    "tests/data/text-ncu-gpt2-h100/gpt2.ncu-console.txt": ("stderr-mid-row", "unseen-rule-text", "progress-bar-cr",
                                                           "non-utf8-in-name"),
    "tests/data/text-nsys-a100-vectoradd/stats_console.txt": ("stderr-mid-row", "progress-bar-cr", "bom"),
    "tests/data/nsys-stats-derived-a100/stats_stdout.csv": ("stderr-mid-row", "reordered-columns"),
    "tests/data/torch-trace-compiled_mlp/trace.json": ("cut-mid-line", "non-utf8-in-name", "reordered-columns"),
    "tests/data/nsys-sqlite-a100/saxpy-mpi-cuda.sqlite": ("truncated", "dropped-table:NVTX_EVENTS"),
    "tests/data/telemetry-smi-gpt2-h100/nvidia-smi-query.csv": ("cut-mid-line", "extra-column"),
}

# What the score found lost or crashed on the code this suite was written against (variant id: why).
KNOWN_LOST: dict[str, str] = {
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pollution")


@pytest.fixture(scope="module")
def harness(scratch) -> Harness:
    return Harness(scratch / "ingests")


@pytest.fixture(scope="module")
def sources() -> dict[str, pollution.Source]:
    return {s.label: s for s in pollution.find_sources(shared=False)}


def _case(label: str, kind: str, slow: bool = False):
    """A test case for a variant; `kind` may name one of several (`dropped-table:NVTX_EVENTS`)."""
    marks = [pytest.mark.slow] if slow else []
    reason = KNOWN_LOST.get(f"{label}::{kind}")
    if reason:
        marks.append(pytest.mark.xfail(strict=True, reason=reason))
    return pytest.param(label, kind, marks=marks, id=f"{label.removeprefix('tests/data/')}::{kind}")


def _variant(sources, scratch, label: str, kind: str) -> Variant:
    found = [v for v in pollution.variants(sources[label], scratch, [kind.partition(":")[0]])
             if v.id == f"{label}::{kind}"]
    assert len(found) == 1, f"{label} has no {kind} variant"
    return found[0]


def _assert_not_lost(outcome: pollution.Outcome) -> None:
    assert outcome.verdict in ("intact", "refused"), f"{outcome.verdict}: {outcome.reason}"


@pytest.mark.parametrize("label, kind", [_case(label, kind) for label, kinds in FAST.items() for kind in kinds])
def test_polluted_variant_is_intact_or_refused(harness, sources, scratch, label, kind):
    _assert_not_lost(harness.score(_variant(sources, scratch, label, kind)))


@functools.cache
def _every_variant() -> tuple[tuple[str, str, str, str], ...]:
    """(source label, format, kind, kind with its detail) of every variant of every tests/data export:
    made once per session (~3 CPU-s), for the slow cases' ids and the generator's coverage test."""
    found = []
    scratch = Path(pollution.tempfile.mkdtemp(prefix="kwh-pollution-collect-"))
    try:
        for source in pollution.find_sources(shared=False):
            for variant in pollution.variants(source, scratch):
                found.append((source.label, source.format, variant.kind, variant.id.removeprefix(f"{source.label}::")))
    finally:
        pollution.shutil.rmtree(scratch, ignore_errors=True)
    return tuple(found)


def _every_case():
    return [_case(label, kind, slow=True) for label, _, _, kind in _every_variant() if kind not in FAST.get(label, ())]


def _slow_tests_selectable(config) -> bool:
    """Whether -m can select a test marked slow (-m 'not slow', the default, cannot)."""
    try:
        from _pytest.mark.expression import Expression
        return Expression.compile(config.option.markexpr).evaluate(
            lambda name, **kwargs: name in ("slow", "parametrize")) if config.option.markexpr else True
    except Exception:       # another pytest's private API: make them all
        return True


def pytest_generate_tests(metafunc):
    # The slow cases' ids come from every variant of every export (_every_variant, ~3 CPU-s), which each
    # xdist worker would make again at collection only for -m 'not slow' to deselect them: without -m
    # selecting slow tests, one deselected placeholder stands for them.
    if metafunc.function is test_every_polluted_variant_is_intact_or_refused:
        cases = (_every_case() if _slow_tests_selectable(metafunc.config) else
                 [pytest.param(None, None, marks=pytest.mark.slow, id="every-variant-made-only-with-m-slow")])
        metafunc.parametrize("label, kind", cases)


def test_every_polluted_variant_is_intact_or_refused(harness, sources, scratch, label, kind):
    """Every variant of every tests/data export (slow: ~25 minutes on 2 cores)."""
    _assert_not_lost(harness.score(_variant(sources, scratch, label, kind)))


# ------------------------------------------------------------ the harness itself can tell them apart

def test_an_unchanged_copy_is_intact(harness, sources):
    source = sources["tests/data/ncu-cupy-h100-stdout/details.csv"]
    outcome = harness.score(Variant(source, "copy", source.path.name, source.path.read_bytes()))
    assert (outcome.verdict, outcome.reason) == ("intact", "equal")


def test_a_row_dropped_without_a_word_is_lost(harness, sources):
    """A launch's row removed from a raw page, the pollution declaring no damage: kwh stores the other
    launches without complaint, and the harness must call that lost."""
    source = sources["tests/data/meta-ncu-log-gpt2-h100/gpt2.raw.csv"]
    lines = source.path.read_bytes().split(b"\n")
    dropped = b"\n".join(lines[:3] + lines[4:])          # header, units, launch 0, (launch 1 gone), launch 2
    outcome = harness.score(Variant(source, "row-dropped", source.path.name, dropped))
    assert outcome.verdict == "lost"
    assert "rows the pollution did not touch" in outcome.reason and "launch_id=1" in outcome.reason


def test_a_touched_row_may_change_only_with_a_warning(harness, sources):
    """The same dropped row, declared touched: still lost, since no warning names the file."""
    source = sources["tests/data/meta-ncu-log-gpt2-h100/gpt2.raw.csv"]
    lines = source.path.read_bytes().split(b"\n")
    dropped = b"\n".join(lines[:3] + lines[4:])
    outcome = harness.score(Variant(source, "row-dropped", source.path.name, dropped,
                                    Damage(launches=frozenset({1}))))
    assert outcome.verdict == "lost" and outcome.reason.startswith("touched rows changed with no warning")


def test_a_refusal_names_the_file(harness, sources):
    source = sources["tests/data/meta-ncu-log-gpt2-h100/gpt2.raw.csv"]
    outcome = harness.score(Variant(source, "garbage", source.path.name, b"\x00\x01garbage\n" * 10,
                                    Damage(whole_file=True)))
    assert outcome.verdict == "refused"
    assert "gpt2.raw.csv" in outcome.reason and "\n" not in outcome.reason


def test_every_format_gets_variants():
    """The generator covers each format kwh reads from tests/data, with the kinds the issue lists."""
    kinds: dict[str, set[str]] = {}
    for _, fmt, kind, _ in _every_variant():
        kinds.setdefault(fmt, set()).add(kind)
    assert {"cut-mid-line", "cut-mid-row", "stderr-mid-row", "bom", "mixed-line-endings", "localized-1.234,5",
            "na-cells", "duplicated-column", "reordered-columns", "extra-column", "header-repeated",
            "non-utf8-file-name", "non-utf8-in-name", "gzip-truncated"} <= kinds["ncu-raw-csv"]
    assert "unseen-rule-text" in kinds["ncu-details-csv"] and "unseen-rule-text" in kinds["ncu-text"]
    assert {"truncated", "dropped-table", "dropped-column"} <= kinds["nsys-sqlite"]
    assert {"cut-mid-line", "reordered-columns", "non-utf8-in-name"} <= kinds["torch-trace"]
    assert set(kinds) >= {"ncu-raw-csv", "ncu-details-csv", "ncu-text", "ncu-rep", "nsys-sqlite", "nsys-stats-csv",
                          "nsys-text", "torch-trace", "nvidia-smi-query"}


def test_localized_numbers():
    assert pollution.localize("27,595,520", ".") == "27.595.520"
    assert pollution.localize("-0.25", " ") == "-0,25"
