"""Planted problem: indexing with a boolean mask in the loop: the result's
shape depends on the data, so the host waits for the mask every step and
every distinct count is a new program.
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/bool_mask.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 16, device=device)
y = torch.randn(64, 1, device=device)

for step in range(10):
    err = model(x) - y
    loss = err[err > 0].pow(2).mean()  # doctor: mask
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
