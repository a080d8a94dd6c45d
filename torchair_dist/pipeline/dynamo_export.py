"""``dynamo_export``: write each rank's GE graph as an offline model.

Per rank it writes ``export_path/rank_{r}/{export_name}{r}.air`` (the serialized ``ModelDef``)
and ``dynamo.pbtxt`` (readable); weights are embedded as ``Const`` below a size threshold and
written as external files above it; with ``export.experimental.auto_atc_config_generated``
rank 0 also writes the model-relation and NUMA configs. Without a process group the files go
straight into ``export_path``.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import torch

from .entry import get_npu_backend
from ..configs import CompilerConfig
from ..errors import ConfigError, ConfigTypeError


def dynamo_export(*args: Any, model: torch.nn.Module, export_path: str = "export_file",
                  export_name: str = "export", dynamic: bool = False,
                  config: Optional[CompilerConfig] = None, **kwargs: Any) -> str:
    """Compile ``model`` with ``fullgraph=True`` in export mode, run it once on ``args`` and
    return the directory this rank's export was written to.

    ``config`` is copied (never modified); its mode is forced to ``max-autotune``, the only
    mode that builds GE graphs. Symlinked export paths are refused.
    """
    if not isinstance(model, torch.nn.Module):
        raise ConfigTypeError(f"dynamo_export(model=...) needs an nn.Module, got "
                              f"{type(model).__name__}")
    if os.path.islink(export_path.rstrip(os.sep) or export_path):
        raise ConfigError(f"export_path {export_path!r} is a symlink; give a real directory")
    config = (config or CompilerConfig()).copy()
    config.mode = "max-autotune"
    os.makedirs(export_path, exist_ok=True)
    config.export.export_mode = True
    config.export.export_path_dir = export_path
    config.export.export_name = export_name
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    config.export.weight_name = {id(t): name for name, t in named.items()}
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=get_npu_backend(compiler_config=config),
                             fullgraph=True, dynamic=dynamic)
    with torch.no_grad():
        compiled(*args, **kwargs)
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else None
    return os.path.join(export_path, f"rank_{rank}") if rank is not None else export_path
