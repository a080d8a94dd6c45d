"""``cache_compile``: a persistent, per-rank compile cache that never runs code it did not write.

Usage (TorchAir's ``torchair.inference.cache_compile`` shape)::

    fast = torchair_dist.cache_compile(model.forward, config=cfg, cache_dir="/var/cache/m")
    out = fast(input_ids)      # 1st process: compile + save; later processes: load, no compile

Design
------
What is stored is the **AOT graph after the common and mode passes** — exactly what the compiler
hands a backend (``GraphContext.gm``) — as *JSON data*, plus how to find its inputs and how to
rebuild the caller's result:

* graph: nodes ``{op, name, target, args, kwargs}``; a call target is an operator *name*
  (``"aten::mm.default"``) that the loader looks up in ``torch.ops`` only (name grammar checked,
  result must be an ``OpOverload``/HOP) or ``operator.getitem``; arguments are JSON scalars, node
  references, lists/tuples/dicts and typed tags (dtype, device, layout, memory_format, float
  bits, op). Lifted constant tensors are raw bytes + dtype + shape. No pickle, no marshal, no
  stored Python source: the only code that runs is what the library generates from the graph
  (ACL: FX's code generator; GE: the converters).
* process groups: a collective's group argument is stored as the group's global ranks and
  tag, never as c10d's creation-order name ("1" can be another group in another job); the
  loader rebinds it to this job's group with those ranks, and refuses the entry (warning,
  recompile) when this job has none (:mod:`.groups`). Groups and device meshes the module's
  submodules hold as attributes, DTensor meshes and group arguments of the call enter the keys
  by their ranks.
* inputs: one entry per graph placeholder: a parameter/buffer by qualified name (the DTensor's
  local shard when it is one), a leaf of the call's arguments, ``none`` for an unused
  non-tensor placeholder (DTensor's DeviceMesh objects), or a *path* for a tensor the function
  reads through a global, a closure or an object (vLLM's ``get_forward_context().mc2_mask``, a
  KV cache in a list of a module kept in a plain list): Dynamo's source of that input as
  ``[root, attr/item steps]`` (:mod:`.sources`), walked again at every call of a loaded entry,
  so the values are the ones the code would read; the entry keeps the tensor's dtype, shape,
  stride and device, and a call where they differ recompiles (with a warning), as a Dynamo
  guard would.
* outputs: the caller-visible pytree spec (``treespec_dumps``: types resolved only through
  pytree's registry) and per leaf a graph output, a view of one, an argument, or a constant.

Load = read + verify + ``FakeTensorProp`` (re-creates ``meta['val']``) + the mode's backend
(``load``: its row's backend steps) + the cross-rank consistency guard. Dynamo, AOT autograd, decompositions and
the graph passes are skipped; that is the warm-start saving. Calls of a loaded entry skip
Dynamo's guards and AOT's runtime wrapper too (as TorchAir's ``cache_compile`` does): the call's
key (shapes, strides, dtypes, devices and scalar values; ``keys.fast_key`` for positional plain
tensors and scalars, ``keys.call_key`` otherwise) picks the entry, and a flat call with a
flat result runs a call generated for the entry (``entry._fast_call``), so a warm call costs
the runner plus about 2 us on CPU.

Key and layout (after TorchAir)::

    {cache_dir | $TORCHAIR_CACHE_HOME | ./.torchair_cache}
      /{cls}_static_{aclgraphcache|gecache}_{key}        key: sha256, 32 hex digits, of
                                                          model code (source files of
                                                          the module classes + package
                                                          versions), str(module), state
                                                          shapes/placements,
                                                          every config option, custom decomps,
                                                          torch/torchair_dist/format versions
        /world{W}global_rank{r}[_tp_rank{t}][_pp_rank{p}]/{func}/
           index.json                                     {signature: {file, sha256, versions}}
           entry-{signature}.json                         one input signature (shapes, dtypes)

Safety (threat model: other local users, torn writes, bit rot, stale files; a writer with our
own uid can forge anything and is out of scope): every directory on the way must be ours
(``lstat``: no symlink, our uid, not writable by group/others); files are opened with
``O_NOFOLLOW`` and ``fstat``-checked (our uid, mode exactly 0600); the entry's sha256 must equal
its index record; versions must match. Any failure
raises :class:`~torchair_dist.errors.CacheRejectedError` internally, is logged as a warning and
the function is recompiled (and the entry rewritten when the directory is ours) — a rejected
entry is never executed. The entry's input/output maps are range-checked against the rebuilt
graph and the module's own parameter names; stored node names only link nodes (FX names the
rebuilt ones). Versions are part of the key (a version change is a plain miss); the in-entry
version check is a second line. Writes go to a ``mkstemp`` file (0600) that is fsync'ed and
``os.replace``-d into place; the index read-modify-write holds ``flock(LOCK_EX)`` on
``.lock`` and readers hold ``LOCK_SH``, so concurrent ranks/processes never see torn files.

Limits: static shapes only (``dynamic=False``; a new input signature compiles and adds an
entry); inference only (runs under ``torch.no_grad()``); the function must compile to one graph
(``fullgraph``) whose inputs are the module's parameters/buffers, the call's arguments and
tensors reached by attribute/index paths from the module, the arguments, the function's
globals or closure, and whose Python side effects (other than tensor writes inside the graph)
do not matter. A group
the function reads from a global or a closure is not in the key (like any other global): if the
next job's code picks a group with other ranks while the stored ranks still exist, the entry
runs on the stored ranks.

Modules: :mod:`.store` (paths, ownership/permission checks, locking, atomic writes, the
index), :mod:`.graph_data` (graph <-> JSON data, ``torch.ops``-only op lookup), :mod:`.keys`
(model key, input signature, versions), :mod:`.groups` (groups by ranks in entries and keys),
:mod:`.record` (cold path: the recording backend and the input/output maps), :mod:`.entry`
(warm path: :class:`LoadedEntry`), :mod:`.sources` (inputs read through paths), :mod:`.api` (:func:`cache_compile`,
:class:`CacheCompiledFunction`).
"""
import os  # noqa: F401 - part of this module's namespace before the split (tests patch
#            ``torchair_dist.cache.os.geteuid``, i.e. the os module every submodule uses)

from .api import CacheCompiledFunction, cache_compile
from .entry import LoadedEntry
from .graph_data import (NotCacheableError, _tensor_data, graph_from_data,  # noqa: F401
                         graph_to_data, lookup_op)
from .keys import _versions, call_key, input_signature, model_key  # noqa: F401
from .store import CACHE_HOME_ENV, FORMAT_VERSION, locked, read_checked, write_atomic

__all__ = ["cache_compile", "CacheCompiledFunction", "LoadedEntry", "NotCacheableError",
           "graph_to_data", "graph_from_data", "lookup_op", "model_key", "call_key",
           "input_signature", "read_checked", "write_atomic", "locked", "CACHE_HOME_ENV",
           "FORMAT_VERSION"]
