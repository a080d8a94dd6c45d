"""Which options take effect, derived from the stage table (:mod:`.stages`): an option takes
effect where a stage that reads it (its gate or a declared read) is part of the mode, on the
platform, with its gate on; every option a user set that does not is named in ONE warning per
compile, with the reason (:func:`check_config_support`)."""
from __future__ import annotations

import warnings
from typing import Dict, FrozenSet, List, Optional, Tuple

from ..base.envvars import CPU_CAPTURE_ENV
from ..configs import CompilerConfig
from .stages import ALWAYS_READ, MODE_TABLE, STAGES, current_platform, mode_row, stages_of


def effective_options(config: CompilerConfig, platform: Optional[str] = None) -> FrozenSet[str]:
    """Options that take effect for ``config`` on ``platform`` (default: this process's)."""
    platform = platform or current_platform()
    found = set(ALWAYS_READ)
    for stage in stages_of(config.peek("mode")):
        if platform not in stage.platform_set():
            continue
        if stage.requires is not None and not STAGES[stage.requires].runs(config):
            continue  # its gate is read only after the required stage's
        if stage.gate:
            found.add(stage.gate)
        if stage.runs(config):
            found.update(stage.reads)
    return frozenset(found)


def _why_not(path: str, config: CompilerConfig, platform: str) -> str:
    mode = config.peek("mode")
    readers = [s for s in STAGES.values() if path in s.all_options()]
    if not readers:
        return "not implemented by torchair_dist (accepted for TorchAir compatibility)"
    here = [s for s in readers if s.name in mode_row(mode).stages]
    if not here:
        modes = sorted(m for m, row in MODE_TABLE.items()
                       if any(s.name in row.stages for s in readers))
        return f"only in mode {' / '.join(modes)}"
    on_platform = [s for s in here if platform in s.platform_set()]
    if not on_platform:
        where = sorted(set().union(*(s.platform_set() for s in here)))
        extra = (f"; on CPU unset {CPU_CAPTURE_ENV}=off" if any(s.name == "capture" for s in here)
                 else "")
        return f"only on {'/'.join(where)}{extra}"
    gates = sorted({s.gate for s in on_platform if s.gate and s.gate != path} |
                   {STAGES[s.requires].gate for s in on_platform if s.requires})
    return f"only when {' or '.join(gates)} is on" if gates else "not read in this configuration"


def ineffective_options(config: CompilerConfig,
                        platform: Optional[str] = None) -> Dict[str, Tuple[object, str]]:
    """{path: (value, reason)} of the options set away from their defaults that do not take
    effect for this mode, platform and config."""
    platform = platform or current_platform()
    effective = effective_options(config, platform)
    return {path: (config.peek(path), _why_not(path, config, platform))
            for path, opt in config.leaves() if opt.is_set() and path not in effective}


DEPRECATION_MESSAGE = ('The "reduce-overhead" mode configuration will be deprecated. '
                       'Please use the "npugraph_ex" backend (mode="npugraph_ex").')


def check_config_support(config: CompilerConfig, platform: Optional[str] = None,
                         stacklevel: int = 3) -> List[str]:
    """ONE ``UserWarning`` naming every set option that does not take effect, with the reason;
    a ``DeprecationWarning`` for ``reduce-overhead``. Returns the paths named."""
    platform = platform or current_platform()
    found = ineffective_options(config, platform)
    mode = config.peek("mode")
    if found:
        listed = "; ".join(f"config.{k}={v!r} ({why})" for k, (v, why) in found.items())
        warnings.warn(f"torchair_dist: these options do not take effect in {mode} mode on "
                      f"{platform}: {listed}", UserWarning, stacklevel=stacklevel)
    if mode == "reduce-overhead":
        warnings.warn(DEPRECATION_MESSAGE, DeprecationWarning, stacklevel=stacklevel)
    return list(found)
