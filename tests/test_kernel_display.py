"""kernel_display (issue 21, item 6): one readable name per kernel identity, unique across identities.
Checked over every kernel name in tests/data (pairs.csv holds those of the six corpus models; the
whole corpus, h100-2026-11 and -11b, gives 210 identities and 210 displays as well)."""

from __future__ import annotations

import collections
import csv
from pathlib import Path

import pytest

from conftest import rows
from kwarehouse.normalize import identity

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name, display", [
    # the examples: what tells the 33 vectorized_elementwise_kernel identities apart is kept
    ("void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<c10::BFloat16>, std::array<char *, 3>>(int, T2, T3)",
     "vectorized_elementwise_kernel<8, CUDAFunctor_add<bf16>>"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(T1::Params)",
     "cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1"),
    # the dtype branch of ATen's dispatch is a lambda number: kept, without the operator() noise
    ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}"
     "::operator()() const::{lambda()#6}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
     "at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() "
     "const::{lambda(float)#1}, std::array<char*, 2ul>)", "vectorized_elementwise_kernel<4, silu_kernel::lambda#1.6.1>"),
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"),
    ("triton_poi_fused__unsafe_view_mul_silu_1", "triton_poi_fused__unsafe_view_mul_silu"),
])
def test_display_of_real_names(name, display):
    assert identity.identify(name).kernel_display == display


def test_every_spelling_of_an_identity_has_one_display():
    pairs = list(csv.DictReader((DATA / "kernel-names" / "pairs.csv").open(encoding="utf-8")))
    for row in pairs:
        spellings = [row["ncu_name"], row["trace_name"]] + ([row["ncu_mangled"]] if row["ncu_mangled"] else [])
        assert len({identity.identify(n).kernel_display for n in spellings}) == 1, spellings


def assert_unique(names: set[str]) -> int:
    by_display = collections.defaultdict(set)
    for name in names:
        ident = identity.identify(name)
        by_display[ident.kernel_display].add(ident.kernel_id)
    assert {d: ids for d, ids in by_display.items() if len(ids) > 1} == {}
    return len(by_display)


NAMES_SQL = ("SELECT kernel_name, kernel_id, kernel_display FROM kernels UNION SELECT kernel_name, kernel_id, "
             "kernel_display FROM kernel_launches UNION SELECT kernel_name, kernel_id, kernel_display FROM kernel_summaries")


def check_warehouse(warehouse) -> set[str]:
    """The warehouse's column agrees: one display per kernel_id and one kernel_id per display."""
    found = rows(warehouse, NAMES_SQL)
    ids_of, displays_of = collections.defaultdict(set), collections.defaultdict(set)
    for _, kernel_id, display in found:
        ids_of[display].add(kernel_id)
        displays_of[kernel_id].add(display)
    assert {d: i for d, i in ids_of.items() if len(i) > 1} == {}
    assert {k: d for k, d in displays_of.items() if len(d) > 1} == {}
    return {name for name, _, _ in found}


def test_displays_are_unique_over_every_kernel_name_in_tests_data(pristine_warehouse):
    from kwarehouse.store.warehouse import Warehouse
    names = check_warehouse(Warehouse(pristine_warehouse))
    pairs = csv.DictReader((DATA / "kernel-names" / "pairs.csv").open(encoding="utf-8"))
    names |= {n for row in pairs for n in (row["ncu_name"], row["trace_name"], row["ncu_mangled"]) if n}
    assert assert_unique(names) > 100
