"""Decoding a GE ``TensorDef`` / ``AttrDef`` into plain Python (dumps, and any executor)."""
from __future__ import annotations

from typing import Any

import torch

from .dtypes import torch_dtype
from .proto import AttrDef, TensorDef


def decode_tensor(tdef: TensorDef) -> torch.Tensor:
    dtype = torch_dtype(tdef.desc.dtype)
    shape = tuple(tdef.desc.shape.dim)
    if not tdef.data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(tdef.data), dtype=dtype).reshape(shape)


def decode_attr(attr: AttrDef) -> Any:
    which = attr.WhichOneof("value")
    if which in ("i", "f", "b", "dt"):
        return getattr(attr, which)
    if which in ("s", "bt", "expression"):
        raw = getattr(attr, which)
        return raw.decode() if which == "s" else raw
    if which == "t":
        return decode_tensor(attr.t)
    if which == "list_list_int":
        return [list(row.list_i) for row in attr.list_list_int.list_list_i]
    if which == "list_list_float":
        return [list(row.list_f) for row in attr.list_list_float.list_list_f]
    if which == "list":
        lst = attr.list
        vt = AttrDef.ListValue
        field = {vt.VT_LIST_STRING: "s", vt.VT_LIST_INT: "i", vt.VT_LIST_FLOAT: "f",
                 vt.VT_LIST_BOOL: "b", vt.VT_LIST_DATA_TYPE: "dt"}.get(lst.val_type)
        if field is None:
            for field in ("i", "f", "b", "s", "dt"):
                if len(getattr(lst, field)):
                    break
        values = list(getattr(lst, field))
        return [v.decode() for v in values] if field == "s" else values
    return None
