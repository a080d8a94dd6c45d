"""GE through CANN on an Ascend host (thin adapter).

This adapter hands the serialized ``ModelDef`` to GE through TorchAir's C++ executor binding
(``torchair.core._backend``: ``initialize_graph_engine``, ``TorchNpuGraph.load/compile/run``),
which is the only public interface to GE's graph API from Python. Its dependencies (``torch_npu``
and ``torchair`` with a CANN toolkit) are imported lazily; when they are missing,
:class:`BackendUnavailableError` says so.

NOT EXERCISED: no Ascend host, CANN toolkit or torch_npu was available where this was written,
so every line below the import checks is unverified. The exact option keys and the
load/compile/run signatures follow TorchAir's published executor and may need adjusting.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ....errors import BackendUnavailableError
from ....platform.interfaces import GeRuntime


def _require_cann():
    try:
        import torch_npu  # noqa: F401
    except Exception as e:  # ImportError or a broken CANN install
        raise BackendUnavailableError(
            f"the GE (CANN) runtime needs torch_npu and the CANN toolkit, which failed to import "
            f"({e}); run max-autotune on this host with the reference executor instead "
            f"(it is chosen automatically when no NPU is present)") from None
    try:
        from torchair.core import _backend  # type: ignore
    except Exception as e:
        raise BackendUnavailableError(
            f"the GE (CANN) runtime needs TorchAir's GE executor binding (torchair.core._backend),"
            f" which failed to import ({e}); install torchair matching your CANN version") from None
    return _backend


class CannRuntime(GeRuntime):
    """Runs a GE graph on an Ascend NPU through GE (unverified here; see module docstring)."""

    name = "cann"

    def __init__(self, options: Optional[Dict[str, str]] = None,
                 graph_options: Optional[Dict[str, str]] = None) -> None:
        self._backend = _require_cann()
        self._options = dict(options or {})              # GE session (global) options
        self._graph_options = dict(graph_options or {})  # this graph's (local) options
        self._graph: Any = None

    def load(self, model_bytes: bytes) -> None:
        backend = self._backend
        backend.initialize_graph_engine(self._options)
        self._graph = backend.TorchNpuGraph()
        self._graph.load(model_bytes, self._graph_options)
        self._graph.compile()

    def run(self, inputs: Sequence[Any]) -> List[Any]:
        if self._graph is None:
            raise BackendUnavailableError("CannRuntime.run() called before load()")
        return list(self._graph.run(list(inputs)))
