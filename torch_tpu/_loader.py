"""``torch_tpu._loader.load()``: what Ray Train calls in each worker before
``init_process_group("tpu_dist")`` (Ray 2.60,
ray.air._internal.device_manager.tpu; the name is TorchTPU's).  Importing
torch_tpu registers the tpu device and the tpu_dist backend; inside Ray,
integrations/ray.py then makes tpu the worker's device for Ray's helpers."""
import sys


def load():
    import torch_tpu

    torch_tpu._register()
    if "ray" in sys.modules:
        from torch_tpu.integrations import ray as _ray

        _ray.bind_worker()
