"""Ray Train on tpu: ``TorchTrainer(..., torch_config=TorchConfig(backend="tpu_dist"))``.

Ray Train 2.60 already knows the name ``tpu_dist``: before each worker's
``init_process_group("tpu_dist")`` it calls ``torch_tpu._loader.load()``
(``ray.air._internal.device_manager.tpu``, written for TorchTPU), and
``torch_tpu/_loader.py`` answers it by calling ``bind_worker()`` below.  The
worker processes import torch_tpu themselves: they run the driver's Python,
whose ``import torch`` autoloads torch_tpu through its ``torch.backends``
entry point (the development install, or an installed wheel).

What Ray does not do on a machine whose tpu is not a Cloud TPU slice:
choose tpu for ``ray.train.torch.get_device()``, ``prepare_model`` and
``prepare_data_loader``.  Ray picks a worker's torch device manager from the
accelerator resources Ray assigned it (``GPU``, ``TPU`` ...); tpu workers
that hold plain CPU resources (Ray's ``use_tpu=True`` needs a Cloud TPU
slice's topology and labels) get the CPU manager, so the model would stay
on cpu.  ``bind_worker()`` therefore makes ``TpuDeviceManager`` the
worker's manager (Ray keeps one per process, chosen on first use; the
choice is made before the training function starts), whose device is
``tpu:LOCAL_RANK``, as torchrun's workers get ``tpu:LOCAL_RANK``
(``torch_tpu._engine.num_devices``: LOCAL_WORLD_SIZE devices per process).  Nothing of Ray is
edited or wrapped; a worker that Ray gave real ``TPU`` resources keeps
Ray's own TPU manager.
"""
import os

import torch


def _manager_base():
    from ray.air._internal.device_manager.tpu import TPUTorchDeviceManager

    return TPUTorchDeviceManager


def _make_manager(index):
    base = _manager_base()

    class TpuDeviceManager(base):
        """Ray's TPU device manager (no streams, torch_tpu available) with
        this worker's tpu device, ``tpu:<index>``; set_device makes a device
        current in the calling thread (Ray Train runs the training function
        in a thread of its own, and the current device is per thread, as
        CUDA's)."""

        def get_devices(self):
            return [torch.device("tpu", index)]

        def set_device(self, device):
            if device is not None:
                torch.tpu.set_device(device)

    return TpuDeviceManager()


def bind_worker():
    """Called in a Ray Train worker right before init_process_group("tpu_dist")
    (through ``torch_tpu._loader.load``): makes tpu the device Ray's
    ``get_device`` / ``prepare_model`` / ``prepare_data_loader`` use, and
    ``tpu:LOCAL_RANK`` its device (``prepare_model`` makes it current in the
    training thread).  Returns the manager, or None
    outside Ray or when Ray already chose a tpu manager of its own."""
    try:
        import ray.air._internal.device_manager as dm
    except ImportError:
        return None
    from torch_tpu import _C, _engine

    if not _C.initialized():
        # Ray sets LOCAL_WORLD_SIZE after the worker imported torch_tpu, whose
        # device count (known at import without starting the engine) was
        # read then: read it again, so that tpu:LOCAL_RANK exists.
        _engine.configure()
    local_rank = int(os.environ.get("LOCAL_RANK") or 0)
    index = local_rank if local_rank < torch.tpu.device_count() else torch.tpu.current_device()
    with dm._torch_device_manager_lock:
        current = dm._torch_device_manager
        if current is not None and isinstance(current, _manager_base()):
            return None
        dm._torch_device_manager = manager = _make_manager(index)
    # Ray set this from the CPU manager's answer just before (for accelerate).
    if os.environ.get("ACCELERATE_TORCH_DEVICE") == "cpu":
        os.environ["ACCELERATE_TORCH_DEVICE"] = str(manager.get_devices()[0])
    return manager
