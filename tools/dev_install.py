"""Development install: puts this checkout on the venv's sys.path and writes
a dist-info with the `torch.backends` entry point (what an editable install
does), so `import torch` autoloads torch_tpu from the checkout."""
import os
import sysconfig

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
site = sysconfig.get_paths()["purelib"]
with open(os.path.join(site, "torch_tpu_dev.pth"), "w") as f:
    f.write(root + "\n")
info = os.path.join(site, "torch_tpu-0.1.0.dist-info")
os.makedirs(info, exist_ok=True)
with open(os.path.join(info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.1.0\n")
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    f.write("[torch.backends]\ntorch_tpu = torch_tpu:_autoload\n\n"
            "[torch_dynamo_backends]\ntpu = torch_tpu._compile:backend\n\n"
            "[vllm.platform_plugins]\ntpu = torch_tpu.vllm:register\n")
with open(os.path.join(info, "RECORD"), "w") as f:
    f.write("")
print(f"torch_tpu: development install of {root} into {site}")
