"""No planted problem: fixed shapes, no host read in the loop, every op with
a tpu rule.  The doctor's report on it has no findings.
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/clean.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(64, 16, device=device)
y = torch.randn(64, 1, device=device)

total = torch.zeros((), device=device)
for step in range(10):
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    total += loss.detach()  # kept on the device: read once, after the loop
print(f"mean loss {total.item() / 10:.4f}")
