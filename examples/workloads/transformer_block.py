"""A pre-norm transformer block (attention + MLP) in bf16: a small stand-in for an LLM layer.

Warm-up iterations first, then the measured iterations between torch.cuda.profiler.start() and stop()
(what `kwh profile --no-profile-from-start` profiles), inside emit_nvtx(record_shapes=True) so every
kernel's NVTX stack names its aten op and input shapes. Weights are random (seeded): nothing is downloaded.
"""

import argparse
import json

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    model = Block(args.dim, args.heads).cuda().to(torch.bfloat16).eval()
    x = torch.randn(args.batch, args.seq_len, args.dim, device="cuda", dtype=torch.bfloat16)
    with torch.inference_mode():
        for _ in range(args.warmup):
            model(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            for _ in range(args.iterations):
                model(x)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(json.dumps({"workload": "transformer_block", "batch": args.batch, "seq_len": args.seq_len,
                      "dim": args.dim, "dtype": "bf16", "gpu": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
