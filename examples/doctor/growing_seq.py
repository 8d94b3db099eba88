"""Planted problem: the sequence length grows by one every step, so every
step's programs have new shapes and compile again.
Run: python -m torch_tpu.doctor --steps 6 examples/doctor/growing_seq.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"  # a CUDA script: the doctor maps cuda to tpu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

for step in range(10):
    seq_len = 8 + step
    x = torch.randn(4, seq_len, 16, device=device)  # doctor: growing
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
