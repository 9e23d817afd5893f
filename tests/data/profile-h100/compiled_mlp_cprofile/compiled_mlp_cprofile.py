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
