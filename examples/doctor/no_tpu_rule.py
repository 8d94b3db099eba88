"""Planted problem: torch.linalg.eigvals has no tpu rule (yet), so every
call copies its inputs to the host, runs on the CPU and copies back.
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/no_tpu_rule.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 16, device=device)

for step in range(10):
    a = torch.randn(16, 16, device=device) * 0.1
    target = x @ torch.linalg.eigvals(a + torch.eye(16, device=device)).real.diag()  # doctor: fallback
    loss = (model(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
