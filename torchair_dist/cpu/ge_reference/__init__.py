"""The GE reference executor: runs a serialized GE graph (``ModelDef``) with torch kernels where
no CANN runtime exists (CPU; NVIDIA GPUs too), one kernel per GE op (:mod:`.kernels`,
:mod:`.kernels_shape`, :mod:`.kernels_hcom`) in generated straight-line code
(:mod:`.executor`). A stand-in for GE on an Ascend NPU, with GE's op semantics."""
from .executor import ReferenceRuntime, generate, schedule
from .opspec import GeRuntimeError

__all__ = ["ReferenceRuntime", "GeRuntimeError", "generate", "schedule"]
