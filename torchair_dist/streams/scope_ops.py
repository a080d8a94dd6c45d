"""TorchAir's scope ops, for post-grad passes written against TorchAir.

A TorchAir pass marks a region of the AOT graph by inserting
``torch.ops.air.scope_enter(keys, values)`` ... ``torch.ops.air.scope_exit()`` (npugraph_ex:
``torch.ops.npugraph_ex.scope_enter`` / ``scope_exit``). Both namespaces are defined here, at
import (unless TorchAir itself already defined them); the ops do nothing when run and are
side-effecting, so no pass drops them. The ``scope_ops`` pipeline stage
(:func:`torchair_dist.passes.scope_lowering.lower_scope_ops`, after the user's post pass)
lowers them to stream switches or ``node.meta["custom"]`` attributes.
"""
from __future__ import annotations

import torch
from torch.fx import has_side_effect

NAMESPACES = ("air", "npugraph_ex")
_libs = []


def _nothing(*args, **kwargs) -> None:
    return None


def _define() -> None:
    for ns in NAMESPACES:
        packet = getattr(torch.ops, ns)
        lib = torch.library.Library(ns, "FRAGMENT")
        _libs.append(lib)
        for name, schema in (("scope_enter", "scope_enter(str[] keys, str[] values) -> ()"),
                             ("scope_exit", "scope_exit() -> ()")):
            if not hasattr(packet, name):
                lib.define(schema)
                lib.impl(name, _nothing, "CompositeExplicitAutograd")
                lib.impl(name, _nothing, "Meta")
            has_side_effect(getattr(packet, name).default)


_define()
