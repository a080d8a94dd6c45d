"""The ``scope_attrs`` stage: TorchAir's Ascend-only scopes found on a graph, named by a warning.

``super_kernel``, ``limit_core_num``, ``op_never_timeout`` and ``data_dump``
(:mod:`torchair_dist.scope`) are ``torch.fx.traceback.annotate`` scopes: every op traced inside
one carries TorchAir's attribute keys (:data:`torchair_dist.scope.SCOPE_KEYS`) in
``node.meta["custom"]`` of the AOT graph. The GE mode writes them as string attributes on the
node's GE ops (where CANN reads them on Ascend); nothing else consumes them, so
:func:`report_scope_attrs` warns once per scope, naming it, unless the graph goes to GE on
Ascend. The graph is never changed.
"""
from __future__ import annotations

import logging
from typing import Dict

import torch

from ..scope import SCOPE_KEYS

log = logging.getLogger("torchair_dist")

_warned: set = set()


def scope_attrs(gm: torch.fx.GraphModule) -> Dict[str, Dict[str, set]]:
    """``{scope name: {attribute key: {values}}}`` of the TorchAir scopes in ``gm``."""
    found: Dict[str, Dict[str, set]] = {}
    for node in gm.graph.nodes:
        for key, value in (node.meta.get("custom") or {}).items():
            if key in SCOPE_KEYS:
                found.setdefault(SCOPE_KEYS[key], {}).setdefault(key, set()).add(str(value))
    return found


def report_scope_attrs(gm: torch.fx.GraphModule, example_inputs, config):
    """Pipeline stage: warn once per scope that a graph carries an attribute nothing here
    acts on (the graph is unchanged; the attributes stay in ``node.meta["custom"]``). The GE
    mode on Ascend hands them to CANN: no warning there."""
    from .. import platform

    if config.get("mode") == "max-autotune" and platform.current().runs_ge_natively:
        return gm
    for scope in scope_attrs(gm):
        if scope not in _warned:
            _warned.add(scope)
            log.warning("torchair_dist.scope.%s: recorded on the graph's ops "
                        "(node.meta['custom']) but has no effect here: it is an Ascend "
                        "GE/ACL per-op setting", scope)
    return gm
