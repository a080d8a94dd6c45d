"""Every piece of module-level state is either cleared by ``torch._dynamo.reset()`` or
documented as process-wide, with the reason (``torchair_dist.base.util.PROCESS_STATE``)."""
import collections
import importlib
import os
import sys
import weakref

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import import_graph  # noqa: E402
import torchair_dist  # noqa: E402
from torchair_dist.base import util  # noqa: E402

_CONTAINERS = (dict, list, set, collections.defaultdict, weakref.WeakKeyDictionary,
               weakref.WeakValueDictionary)
_GENERATED = {"torchair_dist.backends.ge.proto.ge_ir_pb2"}  # protoc's module


def _module_state():
    """{"module:name": value} of the lowercase module-level containers of the package."""
    found = {}
    for module in sorted(import_graph.modules()):
        if module in _GENERATED:
            continue
        for name, value in vars(importlib.import_module(module)).items():
            if isinstance(value, _CONTAINERS) and not name.startswith("__") \
                    and not name.lstrip("_").isupper():
                found[f"{module}:{name}"] = value
    return found


def test_every_module_level_container_is_declared():
    undeclared = sorted(set(_module_state()) - set(util.PROCESS_STATE))
    assert not undeclared, (f"declare these in torchair_dist.base.util.PROCESS_STATE (cleared by "
                            f"torch._dynamo.reset() or why process-wide): {undeclared}")


def test_every_declared_entry_exists_and_says_why():
    for key, why in util.PROCESS_STATE.items():
        module, name = key.split(":")
        assert hasattr(importlib.import_module(module), name), key
        assert why == util.RESET or len(why) > 10, key


def test_dynamo_reset_clears_what_it_declares():
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    fn = torch.compile(lambda x: x * 2 + 1, backend=torchair_dist.get_npu_backend(
        compiler_config=cfg), fullgraph=True)
    x = torch.ones(4)
    fn(x), fn(x)
    state = _module_state()
    cleared = [k for k, why in util.PROCESS_STATE.items() if why == util.RESET and k in state]
    assert any(len(state[k]) for k in cleared), "the compile filled none of the reset state"
    from torchair_dist.pipeline import route as compiler

    assert next(compiler._graph_ids) > 0
    torch._dynamo.reset()
    state = _module_state()
    # a counter cell a live runner holds is zeroed in place instead of dropped
    left = {k: v for k in cleared for v in [state[k]]
            if len(v) and not (isinstance(v, dict) and all(c == [0] for c in v.values()))}
    assert not left, left
    assert next(compiler._graph_ids) == 0
