"""``register_replacement``: a user's pattern -> replacement pass, TorchAir's signature.

A pattern is traced and matched by inductor's pattern matcher (what TorchAir builds on too);
every registered pattern goes into one process-wide ``PatternMatcherPass`` that the
``user_patterns`` pipeline stage applies to the AOT graph in every mode, when
``experimental_config.pattern_fusion_pass`` (``options={"pattern_fusion_pass": ...}``) is on
(the default). Patterns are matched against the graph after AOT decompositions, so write them
with the aten ops the graph holds (``fwd_only`` traces them that way).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Sequence

import torch
from torch._inductor import pattern_matcher as _pm

log = logging.getLogger("torchair_dist")

fwd_only = _pm.fwd_only
_PASS = _pm.PatternMatcherPass(pass_name="torchair_dist_user_patterns")
_count = 0


def _return_true(match) -> bool:
    return True


def register_replacement(search_fn: Callable, replace_fn: Callable,
                         example_inputs: Sequence[Any], trace_fn: Callable = fwd_only,
                         extra_check: Callable = _return_true, search_fn_pattern=None,
                         scalar_workaround: Optional[Dict[str, Any]] = None,
                         skip_duplicates: bool = False) -> bool:
    """Replace every match of ``search_fn`` (traced on ``example_inputs``) by
    ``replace_fn`` in graphs compiled afterwards. Returns whether it was registered."""
    global _count
    done = _pm.register_replacement(search_fn, replace_fn, list(example_inputs), trace_fn,
                                    _PASS, extra_check=extra_check,
                                    scalar_workaround=scalar_workaround,
                                    search_fn_pattern=search_fn_pattern,
                                    skip_duplicates=skip_duplicates)
    if done:
        _count += 1
    return done


def clear_replacements() -> None:
    """Forget every registered pattern (graphs compiled afterwards are not rewritten)."""
    global _PASS, _count
    _PASS = _pm.PatternMatcherPass(pass_name="torchair_dist_user_patterns")
    _count = 0


def registered() -> int:
    """How many patterns are registered in this process."""
    return _count


def apply_user_patterns(gm: torch.fx.GraphModule, example_inputs, config):
    """Pipeline stage: apply the registered patterns (nothing when there are none)."""
    if _count == 0:
        return gm
    n = _PASS.apply(gm.graph)
    if n:
        log.debug("user patterns: %d replacement(s)", n)
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return gm
