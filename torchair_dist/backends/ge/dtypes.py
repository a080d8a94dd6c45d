"""torch dtype <-> GE ``DataType`` (``DT_*``) mapping."""
from __future__ import annotations

import torch

from ...errors import UnsupportedOpError
from .proto import DataType

_TORCH_TO_GE = {
    torch.float32: DataType.DT_FLOAT,
    torch.float16: DataType.DT_FLOAT16,
    torch.bfloat16: DataType.DT_BF16,
    torch.float64: DataType.DT_DOUBLE,
    torch.int8: DataType.DT_INT8,
    torch.uint8: DataType.DT_UINT8,
    torch.int16: DataType.DT_INT16,
    torch.uint16: DataType.DT_UINT16,
    torch.int32: DataType.DT_INT32,
    torch.uint32: DataType.DT_UINT32,
    torch.int64: DataType.DT_INT64,
    torch.uint64: DataType.DT_UINT64,
    torch.bool: DataType.DT_BOOL,
    torch.complex64: DataType.DT_COMPLEX64,
    torch.complex128: DataType.DT_COMPLEX128,
    torch.complex32: DataType.DT_COMPLEX32,
    torch.float8_e5m2: DataType.DT_FLOAT8_E5M2,
    torch.float8_e4m3fn: DataType.DT_FLOAT8_E4M3FN,
}
_GE_TO_TORCH = {v: k for k, v in _TORCH_TO_GE.items()}


def ge_dtype(dtype: torch.dtype) -> int:
    """The GE DT_* value of a torch dtype."""
    try:
        return _TORCH_TO_GE[dtype]
    except KeyError:
        raise UnsupportedOpError(f"torch dtype {dtype} has no GE DataType") from None


def torch_dtype(ge: int) -> torch.dtype:
    """The torch dtype of a GE DT_* value (DT_UNDEFINED reads as float32, like GE does)."""
    if ge == DataType.DT_UNDEFINED:
        return torch.float32
    try:
        return _GE_TO_TORCH[ge]
    except KeyError:
        raise UnsupportedOpError(
            f"GE DataType {DataType.Name(ge) if ge in DataType.values() else ge} has no torch dtype"
        ) from None


def ge_dtype_name(ge: int) -> str:
    return DataType.Name(ge)
