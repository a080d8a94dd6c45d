"""GE converters: ONE registry table (:data:`CONVERTERS`), filled by the modules below.

``aten_attention`` (scaled dot-product attention, decomposed), ``aten_math`` (arithmetic, comparisons, activations, reductions, matmuls, norms), ``aten_shape``
(views, slicing, concatenation, indexing), ``aten_extra`` (further ops
the HF model sweep found), ``aten_select`` (sort, max/min.dim, argmin, histc,
floor_divide, grouped matmul), ``aten_update`` (index_copy/index_put/scatter as
ScatterNdUpdate, in place on a RefData input for KV caches), ``aten_misc`` (casts, copies, factories, symbolic
sizes), ``collectives`` (``_c10d_functional`` -> Hcom*), ``collectives_ext`` (the
``torchair_dist::`` ops: list all_gather, all_to_all_v, send, recv) and ``streams`` (the
``torchair_dist_streams::`` ops: stream attributes and control edges). Each registration names
the GE op types it may emit.
"""
from .registry import CONVERTERS, Converter, lookup, register, target_key  # noqa: F401
from . import aten_attention, aten_extra, aten_math, aten_misc, aten_select  # noqa: F401,E402
from . import aten_shape, aten_update  # noqa: F401,E402
from . import aten_conv, aten_fft, aten_lu, aten_order, aten_polynomials, aten_special  # noqa: F401,E402
from . import aten_resample  # noqa: F401,E402
from . import aten_core, aten_dynamic, aten_linalg, aten_more  # noqa: F401,E402  (aten_core after the others: it aliases their prims twins)
from . import collectives, collectives_ext, streams  # noqa: F401,E402
