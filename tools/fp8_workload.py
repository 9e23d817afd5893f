"""A small fp8/bf16 GEMM workload for real ncu exports with the tensor roofline section (issue 18).

Runs torch._scaled_mm in fp8 (e4m3 x e4m3, e5m2 x e4m3) and a bf16 torch.mm on shapes given below,
3 warm-up iterations, then one iteration between cudaProfilerStart/Stop (for `ncu --profile-from-start
off`) inside emit_nvtx(record_shapes=True), so each kernel's NVTX stack carries the op and its shapes.
`--mode trace` instead records 2 iterations with the PyTorch profiler (record_shapes) to trace.json.
tools/gen_fp8.sh runs both on a GPU machine.
"""

import argparse
import json

import torch

SHAPES = [(4096, 4096, 4096), (2048, 2816, 1024), (8192, 1024, 4096)]


def operands(m, n, k):
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda")        # column-major B for _scaled_mm: pass b.t()
    return a, b


def iteration(tensors):
    one = torch.tensor(1.0, device="cuda")
    out = []
    for (m, n, k), (a, b) in tensors.items():
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        out.append(torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        a5 = a.to(torch.float8_e5m2)
        out.append(torch._scaled_mm(a5, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        out.append(torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16).t()))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["ncu", "trace"], required=True)
    parser.add_argument("--out", default="trace.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    tensors = {s: operands(*s) for s in SHAPES}
    for _ in range(3):
        iteration(tensors)
    torch.cuda.synchronize()
    if args.mode == "ncu":
        torch.cuda.cudart().cudaProfilerStart()
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            iteration(tensors)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    else:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            for _ in range(2):
                iteration(tensors)
            torch.cuda.synchronize()
        prof.export_chrome_trace(args.out)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "shapes_mnk": SHAPES}))


if __name__ == "__main__":
    main()
