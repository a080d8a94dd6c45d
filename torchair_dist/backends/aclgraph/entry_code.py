"""The generated code of an ACL-graph runner's hot path: the capture key of a call, and the
replay of a capture without the runner's per-call checks (one Python frame per replay)."""
from __future__ import annotations

import logging
import weakref

import torch

from .outputs import hand_out, keep, use_count

log = logging.getLogger("torchair_dist")

_SCALARS = (int, float, bool)

# One replay of a capture without the runner's per-call checks, as source: ``C`` is the
# capture's _Capture.fast tuple and ``A`` the caller's inputs. Inputs are fed (the record
# stand-in's replay reads the copied inputs from A itself; otherwise they are copied into the
# captured buffers), the graph is replayed, the replay counted and logged at DEBUG (the
# logger's level cache answers without a call) and the captured outputs handed out as fresh
# objects. Before the replay, each storage of pool outputs it is about to write (``watch``)
# that the caller still holds (its use count above the graph's own references) is moved onto
# a copy (.outputs.keep). Both ``replay(A, C)`` and the body of ``entry`` are this text.
_REPLAY_BODY = """\
    (reads, static, indices, narrowed, clone, replay, outputs, replays, name, key_name,
     watch, pool_positions) = C
    for held in watch:
        if use_count(held.ptr) > held.base:
            keep(held)
    if reads:
        replay(A)
    else:
        for i in indices:
            if clone or A[i].data_ptr() != static[i].data_ptr():
                static[i].copy_(A[i])
        for i, part in narrowed:
            part(static[i]).copy_(part(A[i]))
        replay()
    replays[0] += 1
    if level_cache.get(10) is not False and log.isEnabledFor(10):
        log.debug("%s: replay of key %s", name, key_name)
    return hand_out(outputs, pool_positions)
"""


_GRAD_OFF_REPLAY = """\
        grad = is_grad()
        if grad:
            set_grad(False)
        try:
            return replay_capture(A, C)  # ``replay`` is a local of the body below
        finally:
            if grad:
                set_grad(True)
"""


def key_and_entry(shape_indices, ptr_indices, examples, fast, slow):
    """``capture_key(A)``, ``entry(A)``, ``replay(A, C)`` and ``make_direct`` generated for
    one graph's inputs.

    The key is (shapes of the non-static inputs, addresses of the parameters) as one
    expression; ``entry`` looks it up in ``fast`` (key -> a capture's ``fast`` tuple) and
    replays that capture in its own frame, else calls the runner's ``slow`` (a
    :class:`weakref.WeakMethod`: the runner holds these functions, and a strong reference back
    would make a cycle that keeps a dropped graph's memory until the cycle collector runs);
    ``replay`` is that replay for the runner's other paths; ``make_direct(slow_direct)`` makes
    ``direct(*A)``, ``entry`` unboxed for a caller that leaves grad mode alone
    (:meth:`AclGraphRunner.direct_call`), with ``slow_direct(A)`` for keys the fast table does
    not answer (held by the caller, not the runner: it may hold the runner strongly)."""
    shapes = []
    for i in shape_indices:
        example = examples[i]
        if isinstance(example, torch.Tensor) and example.numel() == 0 and example.dim() == 1:
            # maybe an effect token (side-effect ops such as _linalg_check_errors): traced as
            # an empty tensor, fed as None at run time
            shapes.append(f"(A[{i}].shape if A[{i}] is not None else None)")
        elif isinstance(example, torch.Tensor):  # AOT feeds a tensor where it traced one
            shapes.append(f"A[{i}].shape")
        else:
            shapes.append(f"(A[{i}] if isinstance(A[{i}], _SCALARS) else None)")
    ptrs = [f"(A[{i}].data_ptr() if isinstance(A[{i}], _Tensor) else None)" for i in ptr_indices]
    key = f"(({''.join(p + ', ' for p in shapes)}), ({''.join(p + ', ' for p in ptrs)}))"
    source = (f"def capture_key(A):\n    return {key}\n\n"
              f"def replay(A, C):\n{_REPLAY_BODY}\n"
              f"def entry(A):\n    C = fast_get({key})\n"
              f"    if C is None:\n        return slow()(A)\n{_REPLAY_BODY}\n")
    # unboxed, grad mode as the caller has it: a replay that reads the caller's inputs (the
    # record stand-in, which turns grad off itself) runs the body; any other replay runs
    # ``replay`` with grad off, as AOT's wrapper would
    direct_source = (f"def direct(*A):\n    C = fast_get({key})\n"
                     f"    if C is None:\n        return slow_direct(A)\n"
                     f"    if not C[0]:\n{_GRAD_OFF_REPLAY}{_REPLAY_BODY}")
    base = {"_SCALARS": _SCALARS, "_Tensor": torch.Tensor, "fast_get": fast.get, "log": log,
            "is_grad": torch.is_grad_enabled, "set_grad": torch._C._set_grad_enabled,
            "use_count": use_count, "keep": keep, "hand_out": hand_out,
            "level_cache": getattr(log, "_cache", {})}  # cleared on every level change
    # The functions are taken out of the scope they were made in (their globals): a function
    # left in its own globals is a reference cycle.
    scope = dict(base, slow=weakref.WeakMethod(slow))
    exec(compile(source, "<torchair_dist runner entry>", "exec"), scope)  # noqa: S102
    capture_key, entry, replay = scope.pop("capture_key"), scope.pop("entry"), scope.pop("replay")
    entry._boxed_call = True

    def make_direct(slow_direct):
        direct_scope = dict(base, slow_direct=slow_direct, replay_capture=replay)
        exec(compile(direct_source, "<torchair_dist runner entry>", "exec"),  # noqa: S102
             direct_scope)
        return direct_scope.pop("direct")

    return capture_key, entry, replay, make_direct
