"""Planted problem: an op with no tpu rule whose gradient has none either.
torch.linalg.eig runs on the CPU, and so does the solve autograd runs for it
in backward (aten::_linalg_solve_ex): the doctor names both at the eig line,
the second "in the backward of linalg_eig".
Run: python -m torch_tpu.doctor --steps 7 examples/doctor/eig_backward.py"""
import torch

device = "cuda" if torch.cuda.is_available() else "tpu"  # a CUDA script: the doctor maps cuda to tpu
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(4, 4, device=device))
opt = torch.optim.SGD([w], lr=0.01)
eye = torch.eye(4, device=device)
for step in range(10):
    vals, vecs = torch.linalg.eig(w @ w.T + eye)  # doctor: eig
    loss = vals.real.sum() + vecs.abs().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
