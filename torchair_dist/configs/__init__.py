"""Configuration: option value types, CompilerConfig and its sections.

Which options take effect where is not kept here: it is derived from the declared pipeline
(``torchair_dist.pipeline.stages``), whose stages say what they read.
"""
from .compiler_config import ACL_MODES, MODES, CompilerConfig
from .compile_options import COMPILE_OPTIONS, apply_compile_options
from .option import track_option_reads

__all__ = ["CompilerConfig", "MODES", "ACL_MODES", "COMPILE_OPTIONS", "apply_compile_options",
           "track_option_reads"]
