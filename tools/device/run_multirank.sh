#!/usr/bin/env bash
# Issue 20: a real 2-rank DDP job (examples/workloads/ddp_imbalanced.py) on a 2-GPU machine, NCCL with
# NVLink multicast off; each rank's trace and manifest land in $OUT/multirank.tgz. Then (same machine)
# the conv-net kernel-name diagnosis of issue 24 (tools/device/conv_kernel_names.sh) into $OUT/convdiag.tgz.
set -uo pipefail
OUT=${OUT:?set OUT}
{ nvidia-smi -L; nvidia-smi topo -m; python3 -c 'import torch, pynvml; print(torch.__version__, torch.cuda.nccl.version())'; ncu --version; } 2>&1
rm -rf /tmp/mr; mkdir -p /tmp/mr
NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
  examples/workloads/ddp_imbalanced.py --out /tmp/mr 2>&1 | tail -30
echo "ddp rc=${PIPESTATUS[0]}"; ls -la /tmp/mr/*
tar czf $OUT/multirank.tgz -C /tmp mr
if [ "${CONV:-1}" = 1 ]; then
  D=/tmp/convdiag timeout 240 bash tools/device/conv_kernel_names.sh
  echo "convdiag rc=$?"
  tar czf $OUT/convdiag.tgz -C /tmp convdiag
fi
