"""torchair_dist: graph mode for multi-card PyTorch inference.

Public API: ``get_npu_backend``, ``get_compiler``, ``CompilerConfig``.
"""
from .backend import get_npu_backend
from .collectives import remap as _remap
from .compiler import get_compiler
from .configs import CompilerConfig

__version__ = "0.1.0"

_remap.install()

__all__ = ["get_npu_backend", "get_compiler", "CompilerConfig", "__version__"]
