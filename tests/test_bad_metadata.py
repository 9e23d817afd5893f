"""Issue 17, never lose or hide data: bad run metadata and bad names fail one file with one line,
and the ingest goes on; hostile kernel names cost linear time; a launch without a name keeps its row.

Real exports (tests/data/ncu-gpt2-h100) with manifests and names crafted here in tmp_path.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import polars as pl
import pytest

from kwarehouse import normalize, runmeta
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError, display_path
from kwarehouse.ingest import read_with, sniff
from kwarehouse.normalize import identity
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA

GPT2 = DATA / "ncu-gpt2-h100"
SURROGATE = "\\ud800"      # as written in JSON text: json.loads makes it a lone surrogate


def run_folder(tmp_path: Path, manifest: str | bytes, name: str = "run") -> Path:
    """A folder with the gpt2 raw export (its Host Name cell set to `name`, so that every folder's
    export has content of its own) and the given manifest.json."""
    folder = tmp_path / name
    folder.mkdir()
    with open(GPT2 / "gpt2.raw.csv", newline="") as handle:
        table = list(csv.reader(handle))
    table[2][table[0].index("Host Name")] = name
    with open(folder / "gpt2.raw.csv", "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
    target = folder / "manifest.json"
    target.write_bytes(manifest if isinstance(manifest, bytes) else manifest.encode())
    return folder


def manifest(**fields) -> str:
    return json.dumps({"model": "gpt2", **fields})


BAD_MANIFESTS = {
    "float batch": ('{"model": "gpt2", "batch": 1e20}', '"batch" must be an integer, not 1e+20', None),
    "float sm_count": ('{"model": "gpt2", "sm_count": 132.0}', '"sm_count" must be an integer, not 132.0', None),
    "int over int64": ('{"model": "gpt2", "batch": 100000000000000000000}',
                       '"batch" is 100000000000000000000, out of the range of a 64-bit integer', None),
    "int under int64": ('{"model": "gpt2", "seq_len": -9223372036854775809}',
                        '"seq_len" is -9223372036854775809, out of the range of a 64-bit integer', None),
    "5000-digit int": ('{"model": "gpt2", "note": ' + "9" * 5000 + "}", "not usable JSON (Exceeds the limit", None),
    "100000 nested lists": ('{"model": "gpt2", "x": ' + "[" * 100000 + "]" * 100000 + "}",
                            "JSON nested more than 32 levels deep; a manifest holds flat run metadata", None),
    "40 nested objects": ('{"model": "gpt2", "x": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}",
                          "JSON nested more than 32 levels deep; a manifest holds flat run metadata", None),
    "surrogate model": (f'{{"model": "{SURROGATE}"}}',
                        "model name \"\\ud800\" contains an unpaired surrogate (not valid UTF-8), '\\ud800'; "
                        "remove it", None),
    "surrogate tag": (f'{{"model": "gpt2", "note": "ok{SURROGATE}"}}',
                      "\"note\" holds an unpaired surrogate '\\ud800' (\"ok\\ud800\"), which is not valid UTF-8; "
                      "fix the text", None),
    "surrogate key": (f'{{"model": "gpt2", "{SURROGATE}": "x"}}', "a key holds an unpaired surrogate", None),
    "surrogate version": (f'{{"model": "gpt2", "torch": "2.{SURROGATE}"}}', '"torch" holds an unpaired surrogate',
                          None),
    "surrogate dtype": (f'{{"model": "gpt2", "dtype": "bf{SURROGATE}"}}', '"dtype" holds an unpaired surrogate', None),
    "not UTF-8": (b'{\n"model": "gpt2",\n"gpu": "H100 \xff"}', "not UTF-8 text (byte 0xff); save the manifest as UTF-8",
                  3),
    "over 1 MiB": (manifest(note="x" * (1 << 20)), "manifest is over 1 MiB, the most kwh reads; "
                                                  "keep run metadata in it and data elsewhere", None),
    "300-char model": (manifest(model="m" * 300), 'model name is 300 characters long ("' + "m" * 40 + '"...); '
                                                   "kwh takes names of at most 200: shorten it", None),
    "NUL in model": (manifest(model="gpt\x002"), "model name \"gpt\\u00002\" contains a control character, '\\x00'; "
                                                  "remove it", None),
    "newline in gpu": (manifest(gpu="H100\nSXM"), "gpu name \"H100\\nSXM\" contains a control character, '\\n'; "
                                                  "remove it", None),
    "blank gpu": (manifest(gpu="  "), "gpu name is empty; give the gpu a name", None),
    "list model": (manifest(model=["gpt2"]), '"model" must be a non-empty string, not ["gpt2"]', None),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_a_bad_manifest_is_one_line_naming_it(tmp_path, case):
    text, message, line = BAD_MANIFESTS[case]
    folder = run_folder(tmp_path, text)
    with pytest.raises(InputError) as caught:
        runmeta.read_metadata(folder)
    error = caught.value
    assert (error.path, error.line) == (str(folder / "manifest.json"), line)
    assert error.message.startswith(message)
    assert "\n" not in str(error) and len(str(error)) < 400
    str(error).encode("utf-8")      # printable whatever the manifest held


def test_bad_manifests_fail_their_folder_and_the_ingest_goes_on(tmp_path):
    bad = [run_folder(tmp_path, BAD_MANIFESTS[case][0], name=f"bad{i}")
           for i, case in enumerate(("int over int64", "100000 nested lists", "surrogate model", "not UTF-8"))]
    good = run_folder(tmp_path, manifest(batch=2 ** 63 - 1, note="fine"), name="good")
    report = ingest_job.ingest([*bad, good], Warehouse(tmp_path / "wh"))
    assert [(r.model, r.kernels) for r in report.runs] == [("gpt2", 3)]
    assert sorted(line.split(": its run manifest is unusable: ")[0] for line in report.failed) == sorted(
        f"{folder}/gpt2.raw.csv" for folder in bad)
    con = Warehouse(tmp_path / "wh").connect()
    assert con.execute("SELECT batch, tags['note'] FROM runs").fetchall() == [(2 ** 63 - 1, "fine")]


def test_a_manifest_with_a_byte_order_mark_is_read(tmp_path):
    folder = run_folder(tmp_path, b"\xef\xbb\xbf" + manifest(batch=4).encode())
    meta = runmeta.read_metadata(folder)
    assert meta.fields == {"model": "gpt2", "batch": 4}


def test_check_name_accepts_names_and_refuses_what_cannot_be_one():
    assert runmeta.check_name("model", " gpt2-xl \n", "--model") == "gpt2-xl"
    assert runmeta.check_name("gpu", "NVIDIA H100 80GB HBM3", "a.csv") == "NVIDIA H100 80GB HBM3"
    assert runmeta.check_name("model", "Llama-3 8B (ｆｐ８) é", "--model") == "Llama-3 8B (ｆｐ８) é"
    assert runmeta.check_name("model", "m" * 200, "--model") == "m" * 200
    refused = {"m" * 201: 'model name is 201 characters long ("' + "m" * 40 + '"...); kwh takes names of at '
                          "most 200: shorten it",
               "": "model name is empty; give the model a name",
               "a\tb": "model name \"a\\tb\" contains a control character, '\\t'; remove it",
               "a\u2028b": "model name \"a\u2028b\" contains a control character, '\\u2028'; remove it",
               "a\x85b": "model name \"a\\x85b\" contains a control character, '\\x85'; remove it",
               "a\udcffb": "model name \"a\\udcffb\" contains an unpaired surrogate (not valid UTF-8), "
                           "'\\udcff'; remove it",
               None: "model name must be a string, not null"}
    for value, message in refused.items():
        with pytest.raises(InputError) as caught:
            runmeta.check_name("model", value, "--model")
        assert str(caught.value) == f"--model: {message}"


def test_display_path_escapes_what_is_not_utf8_or_printable(tmp_path):
    name = os.fsdecode(b"gpt2-\xff.raw.csv")
    assert display_path(tmp_path / name) == f"{tmp_path}/gpt2-\\xff.raw.csv"
    assert display_path(b"runs/a\nb.csv") == "runs/a\\nb.csv"
    assert display_path("runs/ok é.csv") == "runs/ok é.csv"
    error = InputError(tmp_path / name, "bad\nrow", line=2)
    assert str(error) == f"{tmp_path}/gpt2-\\xff.raw.csv:2: bad\\nrow"
    str(error).encode("utf-8")


def test_a_file_whose_name_is_not_utf8_is_ingested(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(GPT2 / "gpt2.raw.csv", folder / os.fsdecode(b"gpt2-\xff.raw.csv"))
    (folder / "broken.raw.csv").write_text('"ID","Kernel Name"\n')
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    for line in report.failed:           # the broken export: one line, printable
        assert "\n" not in line
        line.encode("utf-8")
    assert [len(r.files) for r in report.runs] == [1]
    con = Warehouse(tmp_path / "wh").connect()
    assert con.execute("SELECT source_files FROM runs").fetchall() == [([f"{folder}/gpt2-\\xff.raw.csv"],)]


# Kernel names: every identity step is linear, and names over MAX_IDENTITY_CHARS get a cheap identity.
K = 1 << 18     # 256 KB names
HOSTILE_NAMES = {
    "nested templates": "k<" * (K // 3) + ">" * (K // 3),
    "nested templates and calls": "k<f(" * (K // 6) + ")>" * (K // 6),
    "nested lambdas": "{lambda(" * (K // 12) + ")#1}" * (K // 12),
    "repeated anonymous namespace": "_GLOBAL__N_" * (K // 11) + "::f",
    "Triton counter lookalike": "triton_" + "a_" * (K // 2) + "x",
    "spaces": "void" + " " * K + "f",
}


@pytest.mark.parametrize("case", HOSTILE_NAMES)
def test_a_256kb_kernel_name_costs_linear_time(case):
    name = HOSTILE_NAMES[case]
    start = time.perf_counter()
    identity.kernel_signature(name), identity.kernel_base(name)     # the full canonical form
    ident = identity.identify(name)                                  # over the limit: the cheap one
    assert time.perf_counter() - start < 2
    assert ident.kernel_name == name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    assert ident.kernel_signature.endswith(f"<{len(name)}-character name, sha256 {digest}>")
    assert ident.kernel_id == identity.kernel_id(ident.kernel_signature)


def test_long_names_keep_distinct_identities_and_short_ones_are_unchanged():
    a, b = ("void k<" + "k<" * 20000 + arg + ">" * 20001 + "(int)" for arg in ("int", "long"))
    ia, ib = identity.identify(a), identity.identify(b)
    assert ia.kernel_base == ib.kernel_base == "k"
    assert ia.kernel_id != ib.kernel_id
    assert identity.identify("void f<(anonymous namespace)::X>(g(h(int)))").kernel_signature == "f<X>"
    assert identity.drop_parenthesized("f<(char)1>(g(int), h)) x(") == "f<1>) x("
    # every Triton spelling the rule used to name still loses its counter
    for kind in ("poi", "red", "per", "tem", "for", "mm", "bmm", "conv", "unk", "fused"):
        assert identity.kernel_signature(f"triton_{kind}_fused_add_12") == f"triton_{kind}_fused_add"


def test_a_256kb_kernel_name_is_ingested_whole(tmp_path):
    name = HOSTILE_NAMES["nested templates and calls"]
    folder = blank_or_rename(tmp_path, launch=1, name=name)
    start = time.perf_counter()
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert time.perf_counter() - start < 10
    assert report.failed == [] and [r.kernels for r in report.runs] == [3]
    con = Warehouse(tmp_path / "wh").connect()
    assert con.execute("SELECT length(kernel_name), kernel_base FROM kernels WHERE launch_id = 1").fetchall() == [
        (len(name), "k")]


def blank_or_rename(tmp_path: Path, launch: int, name: str) -> Path:
    """A copy of the gpt2 raw export whose launch `launch` has Kernel Name `name`."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(GPT2 / "manifest.ncu.json", folder)
    with open(GPT2 / "gpt2.raw.csv", newline="") as handle:
        table = list(csv.reader(handle))
    column = table[0].index("Kernel Name")
    table[2 + launch][column] = name
    with open(folder / "gpt2.raw.csv", "w", newline="") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
    return folder


# A launch exported without a kernel name.
def test_normalize_names_a_launch_without_a_name(tmp_path):
    folder = blank_or_rename(tmp_path, launch=0, name="")
    path = folder / "gpt2.raw.csv"
    result = read_with(sniff(path), path)
    assert result.launches.filter(pl.col("launch_id") == 0)["kernel_name"].to_list() in ([None], [""])
    metrics = normalize.normalize_source_metrics(result.metrics, result.page)
    launches = result.launches.join(normalize.headline_columns(metrics), on="launch_id", how="left")
    kernels = normalize.normalize_kernels(launches, metrics, normalize.KernelRules.load())
    unnamed = kernels.filter(pl.col("launch_id") == 0).row(0, named=True)
    assert kernels.height == 3
    assert (unnamed["kernel_name"], unnamed["kernel_base"], unnamed["kernel_signature"], unnamed["library"]) == (
        identity.UNNAMED_KERNEL, identity.UNNAMED_KERNEL, identity.UNNAMED_KERNEL, "unknown")
    assert unnamed["metric_count"] > 800


def test_a_launch_without_a_name_keeps_its_kernels_row(tmp_path):
    folder = blank_or_rename(tmp_path, launch=0, name="")
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert report.failed == []
    con = Warehouse(tmp_path / "wh").connect()
    assert con.execute("SELECT count(*) FROM metrics m WHERE NOT EXISTS (SELECT 1 FROM kernels k "
                       "WHERE k.run_id = m.run_id AND k.launch_id = m.launch_id)").fetchall() == [(0,)]
    assert con.execute("SELECT launch_id, kernel_name FROM kernels WHERE launch_id = 0").fetchall() == [
        (0, identity.UNNAMED_KERNEL)]
