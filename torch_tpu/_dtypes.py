"""dtypes: torch.dtype <-> engine dtype codes (the PJRT element type
numbers), PyTorch's ScalarType names for messages, and the two dtype rules
adapters share: the type a result computes in (opmath) and the type a
Scalar argument is passed in."""
import torch

_TABLE = [
    (torch.bool, 1), (torch.int8, 2), (torch.int16, 3), (torch.int32, 4), (torch.int64, 5),
    (torch.uint8, 6), (torch.uint16, 7), (torch.uint32, 8), (torch.uint64, 9),
    (torch.float16, 10), (torch.float32, 11), (torch.float64, 12), (torch.bfloat16, 13),
    (torch.complex64, 14), (torch.complex128, 15),
    (torch.float8_e5m2, 16), (torch.float8_e4m3fn, 17), (torch.float8_e5m2fnuz, 19), (torch.float8_e4m3fnuz, 20),
]
CODE = {dt: code for dt, code in _TABLE}
DTYPE = [None] * 21
for _dt, _c in _TABLE:
    DTYPE[_c] = _dt

# PyTorch's ScalarType names, as its messages print them ("result type Float
# can't be cast to the desired output type Long").
_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
          torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
          torch.uint8: "Byte", torch.bool: "Bool", torch.float8_e5m2: "Float8_e5m2",
          torch.float8_e4m3fn: "Float8_e4m3fn", torch.float8_e5m2fnuz: "Float8_e5m2fnuz",
          torch.float8_e4m3fnuz: "Float8_e4m3fnuz", torch.complex64: "ComplexFloat",
          torch.complex128: "ComplexDouble", torch.complex32: "ComplexHalf"}

HALF = (torch.float16, torch.bfloat16)
# the 8-bit floats compute in float32 as well (as on CPU)
LOW = HALF + (torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float8_e4m3fnuz)


def dtype_code(dtype):
    try:
        return CODE[dtype]
    except KeyError:
        raise TypeError(f"tpu does not support dtype {dtype}") from None


def scalar_type_name(dtype):
    """"Float", "Long", "BFloat16" ... (str(dtype) for the others)."""
    return _NAMES.get(dtype, str(dtype))


def opmath(dtype):
    """The type a result of `dtype` computes and accumulates in: float32 for
    the half and 8-bit float types, the dtype itself otherwise (PyTorch's opmath / acc_type;
    the C rules' tpu_op_opmath)."""
    return torch.float32 if dtype in LOW else dtype


def coef_dtype(dtype):
    """The type PyTorch converts a Scalar argument (alpha, beta, eps, a
    ScalarList entry ...) to for a result of `dtype`: float64 for double,
    float32 for the other floating types, bool for bool, int64 otherwise."""
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point:
        return torch.float32
    if dtype == torch.bool:
        return torch.bool
    return torch.int64
