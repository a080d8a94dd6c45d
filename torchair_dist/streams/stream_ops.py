"""The ``torchair_dist_streams`` op library: streams and events as tagged graph ops.

Every stream and event is named by a string *tag*; the empty tag ``""`` means "the current
stream" (inside a capture: the capture stream). All ops are registered with
``torch.fx.has_side_effect``, so Dynamo's and AOT's dead-code elimination keep them, and none
mutates a tensor, so functionalization passes them through unchanged; the program order of the
graph carries their ordering (passes must not move nodes across them: they are side-effect
nodes, see ``passes/overlap.py``).

Schemas::

    torchair_dist_streams::stream_enter(str tag, int priority) -> ()
        What follows runs on stream ``tag`` until the matching ``stream_exit``.
    torchair_dist_streams::stream_exit(str tag) -> ()
        Leave stream ``tag`` (must be the innermost entered stream) for the enclosing one.
    torchair_dist_streams::fork(str[] tags) -> ()
        Each stream of ``tags`` waits for the work issued so far on the current stream
        (inserted at the start of a graph: side streams fork from the capture stream).
    torchair_dist_streams::join(str[] tags) -> ()
        The current stream waits for all work issued so far on each stream of ``tags``
        (inserted before the graph's output: side streams join back to the capture stream).
    torchair_dist_streams::event_record(str event, str stream) -> ()
        Record event ``event`` on ``stream`` ("" = current stream).
    torchair_dist_streams::event_wait(str event, str stream) -> ()
        ``stream`` ("" = current) waits until the last record of ``event`` completed.
    torchair_dist_streams::stream_wait_stream(str waiting, str waited_on) -> ()
        ``waiting`` waits for all work issued so far on ``waited_on`` ("" = current).
    torchair_dist_streams::synchronize(str stream) -> ()
        Host waits for ``stream`` ("" = the whole device). Not allowed inside a device capture.
    torchair_dist_streams::wait_tensor(Tensor self, Tensor dependency, str event) -> ()
        What follows on the current stream starts after ``dependency`` is computed. ``event``
        names the event the rewrite recorded right after ``dependency``'s producer ("" = none:
        the dependency comes from before the graph).
    torchair_dist_streams::record_stream(Tensor self, str stream) -> ()
        ``self`` is used on ``stream``: its memory is not reused before that stream's work
        issued so far is done (``Tensor.record_stream``).

Kernels: on CPU every op is ordering only (no streams exist; program order already respects
every dependency). With a device the kernels call :mod:`.runtime`, which maps tags to real
streams and events of the platform (thin and untested here: no device in CI).
"""
from __future__ import annotations

import torch
from torch.fx import has_side_effect

from . import runtime

NAMESPACE = "torchair_dist_streams"

SCHEMAS = {
    "stream_enter": "stream_enter(str tag, int priority) -> ()",
    "stream_exit": "stream_exit(str tag) -> ()",
    "fork": "fork(str[] tags) -> ()",
    "join": "join(str[] tags) -> ()",
    "event_record": "event_record(str event, str stream) -> ()",
    "event_wait": "event_wait(str event, str stream) -> ()",
    "stream_wait_stream": "stream_wait_stream(str waiting, str waited_on) -> ()",
    "synchronize": "synchronize(str stream) -> ()",
    "wait_tensor": "wait_tensor(Tensor self, Tensor dependency, str event) -> ()",
    "record_stream": "record_stream(Tensor self, str stream) -> ()",
}

_KERNELS = {
    "stream_enter": runtime.stream_enter,
    "stream_exit": runtime.stream_exit,
    "fork": runtime.fork,
    "join": runtime.join,
    "event_record": runtime.event_record,
    "event_wait": runtime.event_wait,
    "stream_wait_stream": runtime.stream_wait_stream,
    "synchronize": runtime.synchronize,
    "wait_tensor": runtime.wait_tensor,
    "record_stream": runtime.record_stream,
}

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")


def _nothing(*args, **kwargs) -> None:
    return None


def _define_all() -> None:
    ns = getattr(torch.ops, NAMESPACE)
    for name, schema in SCHEMAS.items():
        if not hasattr(ns, name):
            _lib.define(schema)
            # CompositeExplicitAutograd serves every device (and ops without tensor args);
            # Meta is the fake kernel: nothing to compute, nothing to return.
            _lib.impl(name, _KERNELS[name], "CompositeExplicitAutograd")
            _lib.impl(name, _nothing, "Meta")
        has_side_effect(getattr(ns, name).default)


_define_all()

ops = getattr(torch.ops, NAMESPACE)
