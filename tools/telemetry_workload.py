"""A bf16 GEMM workload for GPU telemetry beside a PyTorch trace (issue 25): warm-up, then --iterations
torch.mm of M x N x K recorded by the PyTorch profiler (record_shapes) to --out, GPU-bound throughout,
so the telemetry samples of the traced window describe the GEMMs. Prints what it ran as JSON.
tools/gen_telemetry.sh runs it on a GPU machine with nvidia-smi and NVML sampling beside it.
"""

import argparse
import json
import time

import torch

M, N, K = 16384, 8192, 8192


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="trace.json")
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    for _ in range(20):
        torch.mm(a, b)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    start_ns = time.time_ns()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(args.iterations):
            torch.mm(a, b)
        torch.cuda.synchronize()
    end_ns = time.time_ns()
    prof.export_chrome_trace(args.out)
    # the run's manifest: its window (host clock, ns since the epoch) around the profiled iterations
    manifest = {"model": "telemetry_gemm", "task": "inference", "dtype": "bf16", "batch": 1,
                "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "start_ns": start_ns, "end_ns": end_ns}
    with open(args.out.rsplit("/", 1)[0] + "/manifest.torchprof.json" if "/" in args.out
              else "manifest.torchprof.json", "w") as handle:
        json.dump(manifest, handle, indent=2)
    print(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "mnk": [M, N, K],
                      "iterations": args.iterations, "host_start_ns": start_ns, "host_end_ns": end_ns,
                      "flops": 2 * M * N * K * args.iterations}))


if __name__ == "__main__":
    main()
