"""Planted problem: `.item()` every step makes the host wait for the device
each step (and cuts the step's program in fused mode).
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/item_per_step.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 16, device=device)
y = torch.randn(64, 1, device=device)

total = 0.0
for step in range(10):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss.item()  # doctor: item
print(f"mean loss {total / 10:.4f}")
