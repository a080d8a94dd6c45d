"""Swap torch.compile's backend for torchair_dist's in a process that runs someone else's tests.

``install(mode)`` replaces ``torch.compile`` with a wrapper that compiles with
``torchair_dist.get_npu_backend`` in ``mode`` ("npugraph_ex" or "max-autotune") wherever the
caller named one of torch's own backends or none:

* a backend name (``"inductor"`` — torch.compile's default —, ``"aot_eager"``, ``"eager"``, ...):
  ours instead;
* ``torch._dynamo.testing.CompileCounterWithBackend(name)``: the counter stays (the test's frame
  counts still hold), the backend it calls becomes ours;
* an ``aot_autograd(...)`` backend object (a test's graph-extracting compiler): ours; a test that
  then reads what that compiler extracted inspects another backend and is marked not applicable
  by the runner's table;
* ``torch._dynamo.testing.CompileCounter`` (counts and runs the graph as it is: no backend) and
  names in :data:`KEPT` (backends that are part of what the test checks) are kept.

``torch._dynamo.compiled_autograd._enable(torch.compile)`` reads ``torch.compile`` when it is
called, so compiled autograd compiles with ours too. Processes that a test spawns (PyTorch's
``MultiProcessTestCase`` starts its ranks with ``spawn``) install the swap through
``swap_site/sitecustomize.py`` (the runner puts that folder on ``PYTHONPATH`` and names the mode
in ``TORCHAIR_DIST_SWAP_MODE``). Nothing here changes the tests' code.
"""
from __future__ import annotations

import functools
import os

ENV = "TORCHAIR_DIST_SWAP_MODE"
MODES = ("npugraph_ex", "max-autotune")
KEPT = frozenset({"invoke_subgraph"})  # a HOP-tracing backend: the tests check its graphs
_installed = []


@functools.lru_cache(maxsize=None)
def our_backend(mode: str):
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torchair_dist.get_npu_backend(compiler_config=cfg)


def swapped(backend, mode: str):
    """What ``backend`` (as given to torch.compile) becomes."""
    from torch._dynamo.backends.common import AotAutograd
    from torch._dynamo.testing import CompileCounterWithBackend

    ours = our_backend(mode)
    if isinstance(backend, str):
        return backend if backend in KEPT else ours
    if isinstance(backend, CompileCounterWithBackend):
        if isinstance(backend.backend, str) and backend.backend not in KEPT:
            backend.backend = ours
        return backend
    if isinstance(backend, AotAutograd):
        return ours
    return backend


def install(mode: str) -> None:
    """Replace ``torch.compile`` in this process (idempotent)."""
    if mode not in MODES:
        raise ValueError(f"{ENV}={mode!r}: expected one of {MODES}")
    if _installed:
        return
    import torch

    real = torch.compile

    @functools.wraps(real)
    def compile(model=None, **kwargs):
        kwargs["backend"] = swapped(kwargs.get("backend", "inductor"), mode)
        return real(model, **kwargs)

    compile.__wrapped__ = real
    torch.compile = compile
    _installed.append(mode)


def install_from_env() -> None:
    mode = os.environ.get(ENV)
    if mode:
        install(mode)
