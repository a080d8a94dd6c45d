"""The send/recv stages on the Dynamo graph (before AOT): ``send_recv`` matches the tags of
every point-to-point pair across ranks (:func:`torchair_dist.collectives.p2p.assign_tags`);
``p2p_order`` (GE mode) keeps their program order."""
from __future__ import annotations

import warnings

from ..collectives.p2p import assign_tags, count_p2p


def preprocess_send_recv(gm, config):
    """The ``send_recv`` stage, on the Dynamo graph before AOT. Returns the graph.

    Requires: a Dynamo graph. Guarantees: send/recv tags are matched across ranks (see the
    module docstring)."""
    assign_tags(gm)
    return gm


def keep_p2p_program_order(gm, config):
    """The ``p2p_order`` stage (GE only; the stage table runs it when
    ``experimental_config.topology_sorting_strategy`` is not already ``"StableRDFS"``): with
    more than one send/recv op, the strategy becomes ``"StableRDFS"`` (``config`` is the
    compile's private copy) and a ``UserWarning`` says so, as TorchAir does: GE's other
    orderings may move a send past the receive its peer waits for."""
    n = count_p2p(gm)
    if n > 1:
        warnings.warn(
            f"the graph has {n} send/recv ops; topology_sorting_strategy changed to "
            f"'StableRDFS' so GE keeps their program order (other strategies may reorder them)",
            UserWarning, stacklevel=2)
        config.experimental_config.topology_sorting_strategy = "StableRDFS"
    return gm
