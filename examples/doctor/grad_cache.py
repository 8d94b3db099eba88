"""Planted problem: generation without torch.no_grad().  The key/value cache
grows by torch.cat with keys and values from a module whose weights require
grad, so autograd records every step's cat and every length compiles anew
(under no_grad the cache would grow in a bucket).
Run: python -m torch_tpu.doctor examples/doctor/grad_cache.py"""
import torch
import torch.nn.functional as F

device = "cuda" if torch.cuda.is_available() else "tpu"  # a CUDA script: the doctor maps cuda to tpu
torch.manual_seed(0)
proj = torch.nn.Linear(16, 48).to(device)
prompt = torch.randn(1, 5, 16, device=device)
_, k, v = proj(prompt[:, :4]).split(16, -1)  # the prompt's keys and values
x = prompt[:, 4:].clone()
for step in range(12):
    q, kn, vn = proj(x).split(16, -1)
    k, v = torch.cat([k, kn], 1), torch.cat([v, vn], 1)  # doctor: cache
    x = F.scaled_dot_product_attention(q, k, v)
print("done")
