"""Planted problem: a Python float that changes every step (the norm's
order p) is an attribute of the program, so every step compiles again.
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/python_float.py"""
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "tpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 16, device=device)

for step in range(10):
    p = 2.0 + 0.1 * step  # an order annealed every step
    h = F.normalize(model(x), p=p, dim=-1)  # doctor: float
    loss = (h - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
