"""CompilerConfig: everything that configures one ``get_npu_backend`` backend."""
from __future__ import annotations

import copy

from .base import ConfigBase
from .option import CallableOption, ChoiceOption
from .sections import (AclGraphConfig, AoeConfig, DebugConfig, DistributedConfig, DumpConfig,
                       ExperimentalConfig, ExportConfig, FusionConfig, GeConfig, InferenceConfig,
                       NpuGraphExConfig)

MODES = ("max-autotune", "reduce-overhead", "npugraph_ex")
ACL_MODES = ("reduce-overhead", "npugraph_ex")


class CompilerConfig(ConfigBase):
    """The configuration of a backend returned by ``get_npu_backend``.

    ``mode`` picks the per-rank compiler: ``max-autotune`` (default) builds a GE graph,
    ``npugraph_ex`` (and its deprecated alias ``reduce-overhead``) captures and replays an
    ACL/CUDA graph (a CPU stand-in on CPU). See the README's config reference for every
    option.
    """

    def __init__(self):
        self.debug = DebugConfig()
        self.aoe_config = AoeConfig()
        self.export = ExportConfig()
        self.dump_config = DumpConfig()
        self.fusion_config = FusionConfig()
        self.experimental_config = ExperimentalConfig()
        self.inference_config = InferenceConfig()
        self.ge_config = GeConfig()
        self.aclgraph_config = AclGraphConfig()
        self.npugraphex_config = NpuGraphExConfig()
        self.distributed_config = DistributedConfig()
        self.mode = ChoiceOption("max-autotune", list(MODES), "per-rank compiler (see README)")
        self.post_grad_custom_pre_pass = CallableOption(
            None, "pass(gm, example_inputs, config) run on the AOT graph before the built-in passes")
        self.post_grad_custom_post_pass = CallableOption(
            None, "pass(gm, example_inputs, config) run on the AOT graph after the built-in passes")
        self._freeze()

    def copy(self) -> "CompilerConfig":
        """A deep, independent copy (callables are shared, everything else is copied)."""
        return copy.deepcopy(self)

    @property
    def is_acl_mode(self) -> bool:
        return self.mode.raw in ACL_MODES
