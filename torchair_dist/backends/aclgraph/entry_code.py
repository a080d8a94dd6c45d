"""The generated code of an ACL-graph runner's hot path: the capture key of a call, and the
replay of a capture without the runner's per-call checks (one Python frame per replay)."""
from __future__ import annotations

import logging

import torch

log = logging.getLogger("torchair_dist")

_SCALARS = (int, float, bool)

# One replay of a capture without the runner's per-call checks, as source: ``C`` is the
# capture's _Capture.fast tuple and ``A`` the caller's inputs. Inputs are fed (the record
# stand-in's replay reads the copied inputs from A itself; otherwise they are copied into the
# captured buffers), the graph is replayed, the replay counted and logged at DEBUG (the
# logger's level cache answers without a call) and the captured outputs handed out as fresh
# objects (the previous ones turn stale: .outputs). Both ``replay(A, C)`` and the body of
# ``entry`` are this text.
_REPLAY_BODY = """\
    (reads, static, indices, narrowed, clone, replay, outputs, replays, name, key_name,
     hand_out, pool_positions) = C
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


def key_and_entry(shape_indices, ptr_indices, examples, fast, slow, slow_direct):
    """``capture_key(A)``, ``entry(A)``, ``replay(A, C)`` and ``direct(*A)`` generated for
    one graph's inputs.

    The key is (shapes of the non-static inputs, addresses of the parameters) as one
    expression; ``entry`` looks it up in ``fast`` (key -> a capture's ``fast`` tuple) and
    replays that capture in its own frame, else calls ``slow``; ``replay`` is that replay
    for the runner's other paths; ``direct`` is ``entry`` unboxed for a caller that leaves
    grad mode alone (:meth:`AclGraphRunner.direct_call`), with ``slow_direct(A)`` for keys
    the fast table does not answer."""
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
              f"    if C is None:\n        return slow(A)\n{_REPLAY_BODY}\n"
              # unboxed, grad mode as the caller has it: a replay that reads the caller's
              # inputs (the record stand-in, which turns grad off itself) runs the body; any
              # other replay runs ``replay`` with grad off, as AOT's wrapper would
              f"def direct(*A):\n    C = fast_get({key})\n"
              f"    if C is None:\n        return slow_direct(A)\n"
              f"    if not C[0]:\n{_GRAD_OFF_REPLAY}{_REPLAY_BODY}")
    scope = {"_SCALARS": _SCALARS, "_Tensor": torch.Tensor, "fast_get": fast.get, "slow": slow,
             "slow_direct": slow_direct, "log": log, "is_grad": torch.is_grad_enabled,
             "set_grad": torch._C._set_grad_enabled,
             "level_cache": getattr(log, "_cache", {})}  # cleared on every level change
    exec(compile(source, "<torchair_dist runner entry>", "exec"), scope)  # noqa: S102
    scope["replay_capture"] = scope["replay"]
    scope["entry"]._boxed_call = True
    return scope["capture_key"], scope["entry"], scope["replay"], scope["direct"]
