#!/bin/bash
# kwh profile on the workloads of issue 31 that failed on the H100: a torch.compile MLP that imports cProfile
# (as transformers and torch.compile do: collect/profile.py shadowed the standard library's profile), and a JAX
# step bracketed with cudaProfilerStart/Stop through ctypes, discovered by the PyTorch profiler from the start.
# Run from the repository root with src on PYTHONPATH; leaves OUT/mlp and OUT/jax (tarred by the caller).
set -u
OUT=${OUT:-/tmp/kwh-real}
mkdir -p "$OUT"
WORK=$(mktemp -d)
cat > "$WORK/compiled_mlp_cprofile.py" <<'PY'
import cProfile, pstats          # what transformers and torch._dynamo import
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda().half()
step = torch.compile(model)
x = torch.randn(64, 1024, device="cuda", dtype=torch.half)
for _ in range(3):
    with torch.no_grad():
        y = step(x)
torch.cuda.synchronize()
print("cProfile.run is", cProfile.run.__module__, "sum", float(y.float().sum()))
PY
cat > "$WORK/jax_step.py" <<'PY'
import ctypes, ctypes.util
import jax, jax.numpy as jnp
cudart = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
@jax.jit
def step(w, x):
    return jnp.tanh(x @ w) @ w.T
w = jnp.ones((1024, 1024), jnp.bfloat16) * 0.01
x = jnp.ones((256, 1024), jnp.bfloat16)
step(w, x).block_until_ready()                    # compile (and autotune) outside the range
cudart.cudaProfilerStart()
for _ in range(2):
    y = step(w, x)
y.block_until_ready()
cudart.cudaProfilerStop()
print("jax", jax.__version__, float(y.astype(jnp.float32).sum()))
PY
export TORCHINDUCTOR_COMPILE_THREADS=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
echo "== ncu $(ncu --version | tail -1); python $(python3 -V)"
SECONDS=0; python3 -m kwarehouse.collect --discovery torch --top 4 --launch-count 6 --preset quick \
  --model compiled_mlp_cprofile -o "$OUT/mlp" -- python3 "$WORK/compiled_mlp_cprofile.py" 2>&1 | tee "$OUT/mlp.out"; echo "== mlp: $SECONDS s"
SECONDS=0; python3 -m kwarehouse.collect --preset roofline --launch-count 6 \
  --discovery-from "$OUT/mlp/discovery/trace.json" --model compiled_mlp_cprofile -o "$OUT/mlp_roofline" \
  -- python3 "$WORK/compiled_mlp_cprofile.py" 2>&1 | tee "$OUT/mlp_roofline.out"; echo "== mlp roofline: $SECONDS s"
SECONDS=0; python3 -m kwarehouse.collect --discovery torch --no-profile-from-start --discovery-from-start \
  --top 4 --launch-count 6 --model jax_step -o "$OUT/jax" -- python3 "$WORK/jax_step.py" 2>&1 | tee "$OUT/jax.out"; echo "== jax: $SECONDS s"
cp "$WORK"/*.py "$OUT/" 2>/dev/null
