"""A 2-rank (or N-rank) DDP training step of a transformer block in bf16 with a deliberate, realistic
imbalance: rank r trains on sequences of seq_len * (1 + r) tokens (the last rank draws the long-document
bucket of a length-bucketed sampler), so its forward/backward take longer and the other ranks wait for
it in DDP's gradient all-reduce.

Each rank writes its PyTorch profiler trace (record_shapes on, with_stack off) of the measured steps as
OUT/rank{r}/rank{r}.trace.json with OUT/rank{r}/manifest.torchprof.json (model, task, dtype, batch,
seq_len of that rank, gpu, date, and the tags rank and world_size). Run with torchrun:

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 2 ddp_imbalanced.py --out DIR
"""

import argparse
import datetime
import json
import os
import platform

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512, help="rank 0's; rank r gets seq_len * (1 + r)")
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    torch.manual_seed(args.seed)               # same initial weights on every rank
    layer = nn.TransformerEncoderLayer(args.d_model, args.d_model // 64, 4 * args.d_model, dropout=0.0,
                                       batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False).cuda().to(torch.bfloat16)
    ddp = DistributedDataParallel(model, device_ids=[local])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    seq_len = args.seq_len * (1 + rank)
    torch.manual_seed(args.seed + 1 + rank)    # each rank its own data
    x = torch.randn(args.batch, seq_len, args.d_model, device="cuda", dtype=torch.bfloat16)

    def step():
        optimizer.zero_grad(set_to_none=True)
        ddp(x).float().square().mean().backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=False) as prof:
        for i in range(args.steps):
            with torch.profiler.record_function(f"train_step_{i}"):
                step()
        torch.cuda.synchronize()
    folder = os.path.join(args.out, f"rank{rank}")
    os.makedirs(folder, exist_ok=True)
    prof.export_chrome_trace(os.path.join(folder, f"rank{rank}.trace.json"))
    manifest = {"model": "ddp_transformer_block", "family": "transformer", "layers": args.layers,
                "task": "train", "dtype": "bf16", "batch": args.batch, "seq_len": seq_len,
                "d_model": args.d_model, "gpu": torch.cuda.get_device_name(),
                "sm_count": torch.cuda.get_device_properties(local).multi_processor_count,
                "rank": rank, "world_size": world, "local_rank": local, "backend": "nccl",
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
                "imbalance": "rank r trains on seq_len * (1 + r) tokens per sequence",
                "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                "date": datetime.date.today().isoformat(), "warmup": args.warmup, "profiled_iterations": args.steps,
                "seed": args.seed}
    with open(os.path.join(folder, "manifest.torchprof.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
