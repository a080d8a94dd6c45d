"""Collective-aware capture: every torch.distributed call in the rank's graph, checked across ranks.

Modules (one concern each):

* :mod:`.spec` — the ONE table of per-collective facts (op names, group/tensor/peer/tag
  arguments, in-place twin, fingerprint fields, p2p role, GE op) that everything below and the
  passes, the cache and the GE converters read;
* :mod:`.collective_ops` — the ``torchair_dist::`` op library (list all_gather, all_to_all_v, send, recv):
  schemas, fake kernels, eager kernels on any c10d backend;
* :mod:`.remap` — the ONE table of Dynamo polyfills for ``torch.distributed`` APIs, installed at
  ``import torchair_dist``;
* :mod:`.decompositions` — the default decomposition table merged first by ``get_npu_backend``;
* :mod:`.p2p` — send/recv preprocessing of the Dynamo graph (tags, GE ordering strategy);
* :mod:`.groups` — stable group names derived from (tag, ranks);
* :mod:`.consistency` — cross-rank fingerprint check before a graph's first run, peer faults;
* :mod:`.failures` — a rank's compile failure published to its peers (ranks fail together).
"""
