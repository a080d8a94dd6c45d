"""GE IR protobuf messages (``ge.proto`` package), generated from ``ge_ir.proto``.

See README.md next to this file for how ``ge_ir_pb2.py`` is regenerated and which protobuf
runtimes can load it.
"""
from .ge_ir_pb2 import (  # noqa: F401
    AttrDef,
    DataType,
    GraphDef,
    ModelDef,
    NamedAttrs,
    OpDef,
    ShapeDef,
    TensorDef,
    TensorDescriptor,
)
