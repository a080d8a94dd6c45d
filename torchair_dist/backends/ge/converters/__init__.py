"""GE converters: ONE registry table (:mod:`.registry`), filled by the modules below, one op
family each; registration does not depend on their import order (aliases resolve at lookup).

``aten_math`` (arithmetic, comparisons, activations, softmax/logsumexp, reductions, matmuls,
norms), ``aten_core`` (the remaining Core ATen elementwise ops and reductions, cumulative ops,
and the ``prims`` ops PyTorch's reference decompositions emit), ``aten_special`` / ``series`` /
``aten_polynomials`` (special functions), ``aten_complex`` (complex numbers, FFTs),
``aten_bitwise`` (signbit, shifts, view.dtype), ``aten_copy`` (casts, copies),
``aten_factories`` (full/zeros/arange/eye/empty),
``aten_symbolic`` (symbolic sizes, scalar reads, asserts), ``aten_shape`` (views, slicing,
concatenation, padding, flip/roll/unfold, repeat, indexing), ``aten_select`` (where,
masked_fill, _unsafe_masked_index, sort, top-k, median/kthvalue, max/min.dim), ``aten_order`` (searching, scatter
reductions, data-dependent lengths), ``aten_dynamic`` (segment reductions, embedding_bag),
``aten_update`` (index_copy/index_put/scatter as ScatterNdUpdate, in place on a RefData input
for KV caches), ``aten_linalg`` / ``aten_lu`` (linear algebra), ``aten_conv`` / ``aten_resample``
(convolutions, pooling, resampling), ``aten_backward`` (conv/pool/resize gradients),
``aten_attention`` (scaled dot-product attention), ``aten_random`` (random ops as GE's
stateless generators keyed per call from torch's generator),
``collectives`` (``_c10d_functional`` -> Hcom*), ``collectives_ext`` (the ``torchair_dist::`` ops:
list all_gather, all_to_all_v, send, recv) and ``streams`` (the ``torchair_dist_streams::`` ops:
stream attributes and control edges). Each registration names the GE op types it may emit.
"""
from .registry import CONVERTERS, Converter, lookup, register, target_key  # noqa: F401
from . import (aten_attention, aten_backward, aten_bitwise, aten_complex,  # noqa: F401,E402
               aten_conv, aten_copy, aten_core,
               aten_dynamic, aten_factories, aten_linalg, aten_lu, aten_math, aten_order,
               aten_polynomials, aten_random, aten_resample, aten_select, aten_shape, aten_special,
               aten_symbolic, aten_update)
from . import collectives, collectives_ext, streams  # noqa: F401,E402
