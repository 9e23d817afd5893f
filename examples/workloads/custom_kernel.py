"""Hand-written CUDA kernels through CuPy's RawKernel: saxpy (memory-bound) and a shared-memory tiled
SGEMM (compute-bound), no PyTorch. The measured iterations run between cudaProfilerStart and
cudaProfilerStop (cupy.cuda.profiler), for `kwh profile --no-profile-from-start`; as a command that
is not PyTorch, kwh profile discovers its kernels with ncu durations (or nsys) rather than the PyTorch profiler.
"""

import argparse
import json

import cupy as cp

SOURCE = r"""
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

#define TILE 32
extern "C" __global__ void sgemm_tiled(int n, const float* A, const float* B, float* C) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < n; t += TILE) {
        As[threadIdx.y][threadIdx.x] = A[row * n + t + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 24, help="saxpy length")
    parser.add_argument("--matrix", type=int, default=2048, help="SGEMM size (a multiple of 32)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    module = cp.RawModule(code=SOURCE)
    saxpy, sgemm = module.get_function("saxpy"), module.get_function("sgemm_tiled")
    rng = cp.random.default_rng(args.seed)
    x, y = rng.random(args.n, dtype=cp.float32), rng.random(args.n, dtype=cp.float32)
    m = args.matrix
    a, b = rng.random((m, m), dtype=cp.float32), rng.random((m, m), dtype=cp.float32)
    c = cp.empty((m, m), dtype=cp.float32)

    def iteration():
        saxpy(((args.n + 255) // 256,), (256,), (cp.int32(args.n), cp.float32(2.0), x, y))
        sgemm((m // 32, m // 32), (32, 32), (cp.int32(m), a, b, c))

    for _ in range(args.warmup):
        iteration()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.start()
    for _ in range(args.iterations):
        iteration()
    cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    print(json.dumps({"workload": "custom_kernel", "n": args.n, "matrix": m, "dtype": "fp32",
                      "cupy": cp.__version__}))


if __name__ == "__main__":
    main()
