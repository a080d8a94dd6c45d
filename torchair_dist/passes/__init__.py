"""Graph passes, shared by both backends: the one place a pipeline stage that takes an FX graph
and rewrites or inspects it lives (the send/recv stages included: :mod:`.send_recv`, over
``collectives/p2p.py``'s tag matching). A pass is
``(gm, example_inputs, config) -> gm`` on AOT's graph, ``(gm, config) -> gm`` on the Dynamo
graph; ``pipeline/stages.py`` says which mode runs which.

The stream passes: :mod:`.stream_rewrite` (``streams``: ``torch.Stream`` / ``torch.Event``
calls -> tagged stream ops), :mod:`.stream_ordering` (``stream_labels`` and ``stream_order``),
:mod:`.scope_lowering` (``scope_ops``: TorchAir's scope ops -> stream switches or attributes)
and :mod:`.happens_before` (``stream_order_check``). The TorchAir-facing ones:
:mod:`.user_patterns` (``register_replacement``'s registry and the ``user_patterns`` stage) and
:mod:`.scope_attrs` (``scope_attrs``). The runtime side (the ops, their kernels, the order
model) stays in :mod:`torchair_dist.streams`.
"""
