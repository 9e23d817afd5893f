#!/usr/bin/env bash
# An ncu capture whose kernels run at the roof (issue 31): SOLBottleneck prints "This workload is utilizing
# greater than 80.0% ..." and "Compute and Memory are well-balanced ..."; and ncu's own rule sources
# (its sections/ folder, for tools/derive_ncu_rules.py). Run on a GPU machine with ncu through the device
# tool, as one command (the lines below, $OUT set); made tests/data/roof-ncu-h100 on 2026-11-26.
set -x; W=/tmp/roof; mkdir -p $W; cd $W
ncu --version > versions.txt; nvidia-smi -L >> versions.txt
python3 -c 'import torch;print(torch.__version__,torch.cuda.get_device_name())' >> versions.txt
S=$(dirname "$(readlink -f "$(command -v ncu)")")/sections; [ -d "$S" ] || S=$(find /opt /usr/local -type d -name sections -path '*ompute*' | head -1)
echo "$S" > sections_path.txt; ls "$S" > sections_ls.txt
tar czf $OUT/ncu_sections.tar.gz -C "$S/.." "$(basename "$S")"
cat > roof_workload.py <<'PY'
# bf16 GEMMs (one compute-bound, two of falling K) and 1 GiB copy/elementwise kernels (memory-bound)
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
k = [torch.randn(8192, n, device="cuda", dtype=torch.bfloat16) for n in (512, 128)]
kt = [t.t().contiguous() for t in k]
x = torch.randn(1 << 28, device="cuda"); y = torch.empty_like(x)
def step():
    a @ b
    for p, q in zip(k, kt): p @ q
    y.copy_(x); x.add_(1.0); torch.softmax(x.view(-1, 4096), -1)
for _ in range(3): step()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
with torch.autograd.profiler.emit_nvtx(record_shapes=True): step()
torch.cuda.synchronize(); torch.cuda.cudart().cudaProfilerStop()
PY
ncu --profile-from-start off --nvtx --clock-control none $(printf -- "--section %s " SpeedOfLight SpeedOfLight_RooflineChart MemoryWorkloadAnalysis ComputeWorkloadAnalysis Occupancy LaunchStats SchedulerStats WarpStateStats InstructionStats) -o roof -f python3 roof_workload.py > ncu.log 2>&1
ncu --import roof.ncu-rep --csv --page details > roof.details.csv
ncu --import roof.ncu-rep --csv --page raw > roof.raw.csv
ncu --import roof.ncu-rep > roof.ncu-console.txt
tar czf $OUT/roof.tar.gz -C /tmp roof
grep -c . roof.*; grep -h "greater than 80\|well-balanced" roof.ncu-console.txt | sort | uniq -c
