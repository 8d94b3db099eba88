"""ATen kernels for the tpu device, one module per family (see README.md).

Each module registers its kernels on import; a module that is missing or
fails to import leaves its ops to the CPU fallback (the failure is
reported, not hidden)."""
import importlib
import warnings

_FAMILIES = ["core", "factory", "random", "elementwise", "math", "activation", "reduce", "linalg", "convolution",
             "pooling", "normalization", "embedding", "loss", "upsample", "padding", "index", "optim", "foreach",
             "search", "rnn", "nonzero", "cholesky", "lu", "fft", "complex", "composite", "transformer",
             "nn_composite", "sparse", "special", "householder", "jacobi",
             "matrix_functions", "lstsq", "segment_reduce", "ldl"]
loaded = []
failed = {}

for _name in _FAMILIES:
    try:
        importlib.import_module(f"{__name__}.{_name}")
        loaded.append(_name)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{_name}":
            failed[_name] = repr(e)
            warnings.warn(f"torch_tpu: kernels of family {_name!r} failed to load: {e!r}")
    except Exception as e:  # noqa: BLE001 - reported, the fallback covers the ops
        failed[_name] = repr(e)
        warnings.warn(f"torch_tpu: kernels of family {_name!r} failed to load: {e!r}")
