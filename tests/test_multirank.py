"""A real 2-rank job (tests/data/multirank-ddp-h200): DDP training step of a transformer block on two H200s,
NCCL all-reduce, rank 1 on sequences twice as long. Each rank's PyTorch trace is a run; the job is both."""

import json
from decimal import Decimal

import pytest

from conftest import DATA, rows
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store.warehouse import Warehouse

JOB = DATA / "multirank-ddp-h200"
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    warehouse = Warehouse(tmp_path_factory.mktemp("multirank") / "wh")
    report = ingest_job.ingest([JOB], warehouse)
    assert report.ok and not report.failed
    return warehouse


def _intervals(rank: int, communication: bool | None = None) -> list[tuple[int, int]]:
    """[start, end) in ns of the rank's GPU events (all, or only / no NCCL kernels), from the trace itself."""
    trace = json.loads((JOB / f"rank{rank}" / f"rank{rank}.trace.json").read_text(), parse_float=Decimal)
    found = []
    for event in trace["traceEvents"]:
        if event.get("cat") not in GPU_CATEGORIES or event.get("ph") != "X":
            continue
        if communication is not None and event["name"].startswith("nccl") != communication:
            continue
        start = int(Decimal(event["ts"]) * 1000)
        found.append((start, start + int(Decimal(event["dur"]) * 1000)))
    return sorted(found)


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, until = 0, None
    for start, end in intervals:
        if until is None or start > until:
            total += end - start
            until = end
        elif end > until:
            total += end - until
            until = end
    return total


def test_both_ranks_ingest_as_one_job(job):
    found = rows(job, "SELECT r.tags['rank'], r.tags['world_size'], r.seq_len, r.gpu, b.job_ranks, b.device_id "
                      "FROM runs r JOIN rank_balance b USING (run_id) ORDER BY 1")
    assert found == [("0", "2", 512, "NVIDIA H200", 2, 0), ("1", "2", 1024, "NVIDIA H200", 2, 1)]


def test_rank_balance_names_the_slow_rank_and_its_excess(job):
    compute = {rank: _union_ns(_intervals(rank, communication=False)) for rank in (0, 1)}
    busy = {rank: _union_ns(_intervals(rank)) for rank in (0, 1)}
    found = rows(job, "SELECT r.tags['rank'], b.busy_ns, b.compute_busy_ns, b.slowest, b.excess_ns "
                      "FROM rank_balance b JOIN runs r USING (run_id) ORDER BY 1")
    median = (compute[0] + compute[1]) / 2
    assert found == [("0", busy[0], compute[0], False, compute[0] - median),
                     ("1", busy[1], compute[1], True, compute[1] - median)]
    # the long-sequence rank computes longer; the short one's all-reduce waited for it on the GPU, so its
    # busy time with the NCCL kernels is the larger: the slowest rank is judged without them
    assert compute[1] > compute[0] and busy[0] > busy[1]


def test_gpu_timeline_has_a_row_per_rank_and_device(job):
    found = rows(job, "SELECT r.tags['rank'], g.device_id, g.busy_ns FROM gpu_timeline g JOIN runs r USING (run_id) "
                      "WHERE g.stream_id IS NULL ORDER BY 1")
    assert found == [("0", 0, _union_ns(_intervals(0))), ("1", 1, _union_ns(_intervals(1)))]


def test_nccl_kernels_are_communication(job):
    found = rows(job, "SELECT DISTINCT op_class, library FROM kernel_launches WHERE kernel_name LIKE 'ncclDevKernel%'")
    assert found == [("communication", "NCCL")]
    nccl = {rank: sum(end - start for start, end in _intervals(rank, communication=True)) for rank in (0, 1)}
    assert rows(job, "SELECT communication_ns FROM rank_balance b JOIN runs r USING (run_id) "
                     "ORDER BY r.tags['rank']") == [(nccl[0],), (nccl[1],)]
