# Records the Kineto fixtures in tests/data/kineto/ (see its README.md).
import os, sys, torch, torch.nn as nn, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity, schedule
from torch.nn.parallel import DistributedDataParallel as DDP

class SimpleMLP(nn.Module):  # stratsim's zoo:SimpleMLP
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(50, 32); self.relu = nn.ReLU(); self.net2 = nn.Linear(32, 8)
    def forward(self, x):
        return torch.sigmoid(self.net2(self.relu(self.net1(x))))

def run(rank, world, out, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(out, f"rank{rank}.json")),
                 record_shapes=True) as prof:
        model = DDP(SimpleMLP())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            model(torch.randn(4, 50)).sum().backward()
            opt.step(); opt.zero_grad()
            prof.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    out = sys.argv[1]; os.makedirs(out, exist_ok=True)
    mp.spawn(run, args=(2, out, 29541), nprocs=2)
