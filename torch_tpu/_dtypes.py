"""torch.dtype <-> engine dtype codes (the PJRT element type numbers)."""
import torch

_TABLE = [
    (torch.bool, 1), (torch.int8, 2), (torch.int16, 3), (torch.int32, 4), (torch.int64, 5),
    (torch.uint8, 6), (torch.uint16, 7), (torch.uint32, 8), (torch.uint64, 9),
    (torch.float16, 10), (torch.float32, 11), (torch.float64, 12), (torch.bfloat16, 13),
    (torch.complex64, 14), (torch.complex128, 15),
]
CODE = {dt: code for dt, code in _TABLE}
DTYPE = [None] * 16
for _dt, _c in _TABLE:
    DTYPE[_c] = _dt


def dtype_code(dtype):
    try:
        return CODE[dtype]
    except KeyError:
        raise TypeError(f"tpu does not support dtype {dtype}") from None
