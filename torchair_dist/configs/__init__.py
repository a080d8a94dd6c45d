"""Configuration: option value types, CompilerConfig and its sections, per-mode support."""
from .compiler_config import ACL_MODES, MODES, CompilerConfig
from .compile_options import COMPILE_OPTIONS, apply_compile_options
from .support import check_config_support, ineffective_options

__all__ = ["CompilerConfig", "MODES", "ACL_MODES", "COMPILE_OPTIONS", "apply_compile_options",
           "check_config_support", "ineffective_options"]
