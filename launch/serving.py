"""A continuous-batching decode loop over a Hugging Face causal LM with per-request KV slots:
the pieces ``launch/serve.py`` and ``tests/models/test_serving_loop.py`` share.

* :func:`request_stream`: a synthetic, seeded stream of requests. Arrivals are counted in
  decode steps (not wall time), so every variant sees the same batches and the same padding,
  whatever its speed: tokens can be compared request by request.
* :class:`SlotKVCache`: one row of K/V per request slot, each row at its own position
  (transformers' ``StaticCache`` keeps one position for the whole batch, and its
  continuous-batching ``PagedAttentionCache`` flattens every batch into one varlen sequence of
  ever-changing length, which cannot be padded to declared batch sizes). Rows are kept compact:
  the active requests are rows ``0..n-1``, so a decode step of padded size ``b`` works on the
  first ``b`` rows. Duck-typed to transformers' cache protocol (``update``), so the model's own
  attention reads it; the attention mask is a prepared 4D mask (transformers uses it as is).
* :func:`serve`: the scheduler. Each decode step admits the requests that have arrived into free
  slots and prefills each (one request at a time, with the variant's :class:`Prefill`), then
  runs one batched decode step over the active slots, padded up to the next declared size;
  padding rows sit at position 0 of free slots and are sliced off. Greedy decoding, no EOS: each
  request generates exactly its output length, so the schedule does not depend on the tokens.
* :func:`make_variant`: the decode step compiled per variant (eager, ours in each mode,
  inductor, torch's CUDA graph trees), each on a code object of its own.
* :class:`Prefill`: the prefill step compiled per variant the same way, its prompt-length
  dimension dynamic. A variant that captures per shape (ours npugraph_ex / reduce-overhead /
  piecewise, CUDA graph trees) gets each prompt padded up to the next declared prefill size,
  so it captures each declared size once, never one graph per prompt length; the padding
  tokens come after the prompt, so the causal mask keeps them out of the real tokens' view.
  The others (eager, max-autotune, inductor) run the prompt's own length through one dynamic
  graph. The step works on a one-row scratch cache (fixed addresses, the row being a graph
  input would make Dynamo specialise on it) whose K/V is then copied into the request's slot.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import re
import time
import types
import warnings
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.fx.experimental._config  # noqa: F401  (backed_size_oblivious)


@dataclasses.dataclass
class Request:
    rid: int
    arrival: int          # decode step at which the request arrives
    prompt: List[int]
    out_len: int          # tokens to generate (the prefill's token included)


def request_stream(n: int, rate: float, prompt_range: Sequence[int],
                   output_range: Sequence[int], vocab: int, seed: int = 0) -> List[Request]:
    """``n`` requests with Poisson arrivals (``rate`` requests per decode step) and uniform
    prompt/output lengths in the inclusive ranges; the same on every rank for one seed."""
    g = random.Random(seed)
    t, out = 0.0, []
    for rid in range(n):
        if rid:
            t += g.expovariate(rate)
        plen = g.randint(*prompt_range)
        out.append(Request(rid, int(t), [g.randrange(3, vocab) for _ in range(plen)],
                           g.randint(max(2, output_range[0]), max(2, output_range[1]))))
    return out


def padded_size(n: int, sizes: Sequence[int]) -> int:
    """The smallest declared size holding ``n`` rows (vLLM pads a batch up the same way)."""
    for s in sorted(sizes):
        if s >= n:
            return s
    raise ValueError(f"{n} active requests exceed the largest capture size {max(sizes)}")


def local_kv_heads(model) -> int:
    """K/V heads on this rank: transformers' TP shards ``k_proj`` column-wise."""
    attn = model.model.layers[0].self_attn
    weight = attn.k_proj.weight
    rows = weight.to_local().shape[0] if hasattr(weight, "to_local") else weight.shape[0]
    return rows // attn.head_dim


class SlotKVCache:
    """K/V of ``slots`` requests, ``[slots, kv_heads, max_len, head_dim]`` per layer.

    Before a forward, :meth:`bind` says which rows it covers (``row0`` .. ``row0 + batch``) and
    the position each new token is written at (``write_pos [batch, tokens]``); ``update``
    scatters the new K/V there and hands the model those rows whole (stale positions are hidden
    by :meth:`mask`)."""

    is_compileable = True

    def __init__(self, model, slots: int, max_len: int):
        cfg = model.config
        heads, dim = local_kv_heads(model), model.model.layers[0].self_attn.head_dim
        dev, dtype = model.device, model.dtype
        shape = (slots, heads, max_len, dim)
        self.keys = [torch.zeros(shape, device=dev, dtype=dtype)
                     for _ in range(cfg.num_hidden_layers)]
        self.values = [torch.zeros(shape, device=dev, dtype=dtype)
                       for _ in range(cfg.num_hidden_layers)]
        self.kv_index = torch.arange(max_len, device=dev)
        for t in self.keys + self.values + [self.kv_index]:
            torch._dynamo.mark_static_address(t)  # fixed buffers: captured graphs write them
        self.slots, self.max_len = slots, max_len
        self.row0 = 0
        self.write_pos: Optional[torch.Tensor] = None

    def bind(self, row0: int, write_pos: torch.Tensor) -> torch.Tensor:
        """Set the rows and write positions of the next forward; returns its 4D bool mask
        ``[batch, 1, tokens, max_len]``: a token sees the positions up to its own."""
        self.row0, self.write_pos = row0, write_pos
        return self.mask(write_pos)

    def mask(self, write_pos: torch.Tensor) -> torch.Tensor:
        return (self.kv_index <= write_pos[:, :, None])[:, None]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        b, h, t, d = key_states.shape
        keys = self.keys[layer_idx][self.row0:self.row0 + b]
        values = self.values[layer_idx][self.row0:self.row0 + b]
        index = self.write_pos[:, None, :, None].expand(b, h, t, d)
        keys.scatter_(2, index, key_states)
        values.scatter_(2, index, value_states)
        return keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are passed explicitly; transformers only asks without them

    def move(self, src: int, dst: int) -> None:
        """Row ``src`` becomes row ``dst`` (compaction when the request in ``dst`` ends)."""
        for buf in self.keys + self.values:
            buf[dst].copy_(buf[src])

    def load(self, row: int, src: "SlotKVCache", length: int) -> None:
        """Positions ``0..length-1`` of ``src``'s row 0 become those of row ``row`` (a
        prefill's K/V, computed in a scratch cache, into the request's slot)."""
        for dst, buf in zip(self.keys + self.values, src.keys + src.values):
            dst[row, :, :length].copy_(buf[0, :, :length])


def prefill(model, cache: SlotKVCache, row: int, prompt: List[int]) -> int:
    """Eager prefill of one request straight into ``row``; its first generated token (the
    loop itself prefills through :class:`Prefill`)."""
    dev = model.device
    ids = torch.tensor([prompt], device=dev)
    pos = torch.arange(len(prompt), device=dev)[None]
    with torch.no_grad():
        mask = cache.bind(row, pos)
        logits = model(input_ids=ids, position_ids=pos, attention_mask=mask, cache=cache,
                       use_cache=True).logits
    return int(logits[0, -1].argmax())


def _decode_step(model):
    def decode_step(tokens, positions, cache):
        mask = cache.bind(0, positions)
        out = model(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=cache,
                    use_cache=True)
        return out.logits[:, -1].argmax(-1)

    return decode_step


def _prefill_step(model):
    def prefill_step(tokens, positions, cache):
        mask = cache.bind(0, positions)
        out = model(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=cache,
                    use_cache=True)
        return out.logits[0].argmax(-1)   # [tokens]: the caller reads the prompt's last one

    return prefill_step


def _own_code(fn: Callable, name: str) -> Callable:
    """``fn`` on a code object of its own: each variant's Dynamo cache entries (and recompile
    limit) are its own, though all share one model."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__,
                              fn.__closure__)


# variant name -> (CompilerConfig.mode, inductor_kernels, piecewise) for ours
OURS = {"npugraph_ex": ("npugraph_ex", False, False),
        "npugraph_ex+inductor_kernels": ("npugraph_ex", True, False),
        "reduce-overhead": ("reduce-overhead", False, False),
        "max-autotune": ("max-autotune", False, False),
        "piecewise": ("npugraph_ex", False, True)}
VARIANTS = ["eager", *OURS, "inductor", "cuda-graph-trees"]
NOT_YET: Dict[str, str] = {}
# variants that capture per input shape: their prompts are padded to the declared prefill sizes
PADDED_PREFILL = frozenset({"npugraph_ex", "npugraph_ex+inductor_kernels", "reduce-overhead",
                            "piecewise", "cuda-graph-trees"})


def ours_backend(mode: str, sizes: Optional[Sequence[int]], inductor_kernels: bool = False,
                 piecewise: bool = False):
    """Our backend in ``mode``; ``sizes`` declared as ``capture_sizes`` (padded up) where given
    and the mode captures."""
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    if mode != "max-autotune" and sizes:
        cfg.npugraphex_config.capture_sizes = sorted(sizes, reverse=True)
        cfg.npugraphex_config.pad_to_capture_size = True
    if inductor_kernels:
        cfg.experimental_config.inductor_kernels = True
    if piecewise:  # attention runs eagerly between the captured pieces
        cfg.npugraphex_config.piecewise = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # reduce-overhead is deprecated
        return torchair_dist.get_npu_backend(compiler_config=cfg)


def _tag(name: str) -> str:
    return name.replace("-", "_").replace("+", "_")


def _compiled(name: str, fn: Callable, sizes: Optional[Sequence[int]], dim: int) -> Callable:
    """``fn(tokens, positions, cache)`` compiled as variant ``name``, dim ``dim`` of tokens and
    positions dynamic from the first call, size 1 not specialised (``backed_size_oblivious``,
    as vLLM's dynamic-shapes option does)."""
    if name == "eager":
        return fn
    if name in OURS:
        mode, kernels, piecewise = OURS[name]
        compiled = torch.compile(fn, backend=ours_backend(mode, sizes, kernels, piecewise),
                                 fullgraph=True)
    elif name in ("inductor", "cuda-graph-trees"):
        compiled = torch.compile(fn, fullgraph=True,
                                 mode="reduce-overhead" if name == "cuda-graph-trees" else None)
    else:
        raise ValueError(f"unknown variant {name!r}; known: {VARIANTS}")
    trees = name == "cuda-graph-trees"

    def dynamic(tokens, positions, cache):
        torch._dynamo.maybe_mark_dynamic(tokens, dim)
        torch._dynamo.maybe_mark_dynamic(positions, dim)
        if trees:
            torch.compiler.cudagraph_mark_step_begin()  # the last replay's outputs are consumed
        with torch.fx.experimental._config.patch(backed_size_oblivious=True):
            return compiled(tokens, positions, cache)

    return dynamic


def make_variant(name: str, model, sizes: Sequence[int]) -> Callable:
    """The decode step ``step(tokens [b, 1], positions [b, 1], cache) -> next tokens [b]``.

    Compiled variants see the batch dimension as dynamic from the first call: one graph for
    every declared size (declared as ``capture_sizes`` in ours), so a graph-capturing variant
    captures each size once in it."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known: {VARIANTS}")
    return _compiled(name, _own_code(_decode_step(model), f"decode_step_{_tag(name)}"), sizes, 0)


def default_prefill_sizes(max_prompt: int, step: int = 8) -> List[int]:
    """Prefill sizes covering prompts up to ``max_prompt``: multiples of ``step``."""
    return list(range(step, max_prompt + step, step))


class Prefill:
    """One variant's prefill: ``prefill(cache, row, prompt) -> first token``.

    The step ``prefill_step(tokens [1, t], positions [1, t], scratch) -> tokens [t]`` is
    compiled with the variant's backend and mode, ``t`` dynamic. Where the variant captures per
    shape (:data:`PADDED_PREFILL`; ``pad`` overrides), the prompt of ``n`` tokens is padded up
    to the next of ``sizes``: padding tokens (id 0) at positions ``n..t-1``, after the prompt,
    so the causal mask hides them from every real token and the first token is read at
    ``n - 1``. The step writes the K/V of a one-row scratch cache, then positions ``0..n-1``
    are copied into the request's slot (the padding's K/V stays behind).
    """

    def __init__(self, name: str, model, sizes: Sequence[int], max_prompt: int,
                 pad: Optional[bool] = None):
        self.name, self.sizes = name, sorted(set(sizes))
        self.pad = name in PADDED_PREFILL if pad is None else pad
        if not self.sizes or self.sizes[0] < 1:
            raise ValueError(f"prefill sizes must be positive, got {sizes}")
        if self.pad and max_prompt > self.sizes[-1]:
            raise ValueError(f"{name}: prompts of up to {max_prompt} tokens exceed the largest "
                             f"prefill size {self.sizes[-1]}; declare a larger one")
        if name not in VARIANTS:
            raise ValueError(f"unknown variant {name!r}; known: {VARIANTS}")
        self.device = model.device
        self.scratch = SlotKVCache(model, 1, max(max_prompt, self.sizes[-1]))
        self.step = _compiled(name, _own_code(_prefill_step(model), f"prefill_step_{_tag(name)}"),
                              None, 1)

    def length(self, n: int) -> int:
        """The prompt length the step runs for a prompt of ``n`` tokens."""
        if not self.pad:
            return n
        if n > self.sizes[-1]:
            raise ValueError(f"{self.name}: a prompt of {n} tokens exceeds the largest prefill "
                             f"size {self.sizes[-1]}; declare a larger one")
        return padded_size(n, self.sizes)

    def inputs(self, prompt: Sequence[int]):
        t = self.length(len(prompt))
        tokens = torch.zeros(1, t, dtype=torch.long)
        tokens[0, :len(prompt)] = torch.tensor(list(prompt), dtype=torch.long)
        return tokens.to(self.device), torch.arange(t, device=self.device)[None]

    def __call__(self, cache: SlotKVCache, row: int, prompt: Sequence[int]) -> int:
        tokens, positions = self.inputs(prompt)
        first = int(self.step(tokens, positions, self.scratch)[len(prompt) - 1])
        cache.load(row, self.scratch, len(prompt))
        return first

    def warm_up(self) -> Dict[int, float]:
        """One prefill per declared size, largest first (into the scratch cache only); seconds
        of each first call (compile + capture for a graph mode)."""
        seconds = {}
        with torch.no_grad():
            for size in sorted(self.sizes, reverse=True):
                tokens, positions = self.inputs([0] * size)
                t0 = time.perf_counter()
                self.step(tokens, positions, self.scratch).tolist()
                _sync(self.device)
                seconds[size] = time.perf_counter() - t0
        return seconds

def _sync(device: torch.device) -> None:
    if device.type != "cpu":
        getattr(torch, device.type).synchronize()


def step_inputs(n_rows: int, size: int, last: List[int], pos: List[int], device):
    """Decode inputs of ``size`` rows: the active rows' last token and write position, then
    padding rows (token 0 at position 0 of a free slot, sliced off after the step)."""
    tokens = torch.zeros(size, 1, dtype=torch.long)
    positions = torch.zeros(size, 1, dtype=torch.long)
    tokens[:n_rows, 0] = torch.tensor(last[:n_rows], dtype=torch.long)
    positions[:n_rows, 0] = torch.tensor(pos[:n_rows], dtype=torch.long)
    return tokens.to(device), positions.to(device)


def warm_up(step: Callable, cache: SlotKVCache, sizes: Sequence[int], device) -> Dict[int, float]:
    """One decode step per declared size, largest first (vLLM's order: smaller captures reuse
    what larger ones freed); seconds of each first call (compile + capture for a graph mode).
    The steps write position 0 of the rows, which every prefill overwrites."""
    seconds = {}
    with torch.no_grad():
        for size in sorted(sizes, reverse=True):
            tokens, positions = step_inputs(0, size, [], [], device)
            t0 = time.perf_counter()
            step(tokens, positions, cache).tolist()
            _sync(device)
            seconds[size] = time.perf_counter() - t0
    return seconds


@dataclasses.dataclass
class ServeResult:
    tokens: Dict[int, List[int]]     # request id -> generated tokens
    wall_s: float                    # the whole stream, prefills included
    step_s: List[float]              # every decode step
    token_gaps_s: List[float]        # per request, time between consecutive tokens
    steps_per_size: Dict[int, int]   # decode steps run at each padded size
    decode_steps: int = 0
    padded_steps: int = 0            # steps with padding rows (fewer requests than the size)
    prefill_s: List[float] = dataclasses.field(default_factory=list)   # every prefill
    prefills_per_size: Dict[int, int] = dataclasses.field(default_factory=collections.Counter)
    padded_prefills: int = 0         # prefills run longer than their prompt
    # graphs Dynamo compiled while serving (after the warm-up), per step
    compiled_while_serving: Dict[str, int] = dataclasses.field(
        default_factory=lambda: {"prefill": 0, "decode": 0})


def serve(step: Callable, model, cache: SlotKVCache, requests: List[Request],
          sizes: Sequence[int], prefill: Optional[Prefill] = None) -> ServeResult:
    """Run the stream to the end: admit, prefill, padded batched decode, retire. ``prefill``
    defaults to an eager one (each prompt at its own length)."""
    from torch._dynamo.utils import counters

    device = model.device
    if prefill is None:
        longest = max(len(r.prompt) for r in requests)
        prefill = Prefill("eager", model, [longest], longest)
    graphs = counters["stats"]

    def timed(kind, fn, *args):
        before = graphs["unique_graphs"]
        t0 = time.perf_counter()
        out = fn(*args)
        _sync(device)
        t1 = time.perf_counter()
        res.compiled_while_serving[kind] += graphs["unique_graphs"] - before
        return out, t0, t1
    pending = collections.deque(sorted(requests, key=lambda r: (r.arrival, r.rid)))
    rows: List[Request] = []          # row i of the cache holds rows[i]
    last: List[int] = []              # per row: last token, next write position, last token time
    pos: List[int] = []
    stamp: List[float] = []
    tokens: Dict[int, List[int]] = {}
    res = ServeResult(tokens, 0.0, [], [], collections.Counter())
    clock = 0
    t_start = time.perf_counter()
    with torch.no_grad():
        while pending or rows:
            while pending and pending[0].arrival <= clock and len(rows) < cache.slots:
                req = pending.popleft()
                first, t0, t1 = timed("prefill", prefill, cache, len(rows), req.prompt)
                res.prefill_s.append(t1 - t0)
                res.prefills_per_size[prefill.length(len(req.prompt))] += 1
                res.padded_prefills += prefill.length(len(req.prompt)) > len(req.prompt)
                tokens[req.rid] = [first]
                if req.out_len > 1:
                    rows.append(req)
                    last.append(first)
                    pos.append(len(req.prompt))
                    stamp.append(time.perf_counter())
            if not rows:
                clock = max(clock + 1, pending[0].arrival) if pending else clock
                continue
            n = len(rows)
            size = padded_size(n, sizes)
            tok_in, pos_in = step_inputs(n, size, last, pos, device)
            # consumed before the next replay
            out, t0, t1 = timed("decode", lambda: step(tok_in, pos_in, cache)[:n].tolist())
            res.step_s.append(t1 - t0)
            res.steps_per_size[size] += 1
            res.padded_steps += size > n
            for i, req in enumerate(rows):
                tokens[req.rid].append(out[i])
                res.token_gaps_s.append(t1 - stamp[i])
                last[i], pos[i], stamp[i] = out[i], pos[i] + 1, t1
            for i in reversed(range(n)):       # retire finished requests, keep rows compact
                if len(tokens[rows[i].rid]) >= rows[i].out_len:
                    end = len(rows) - 1
                    if i != end:
                        cache.move(end, i)
                        for lst in (rows, last, pos, stamp):
                            lst[i] = lst[end]
                    for lst in (rows, last, pos, stamp):
                        lst.pop()
            clock += 1
    res.wall_s = time.perf_counter() - t_start
    res.decode_steps = len(res.step_s)
    return res


def max_len_for(requests: List[Request]) -> int:
    return max(len(r.prompt) + r.out_len for r in requests)


def captures_per_size(report) -> dict:
    """Captures per size over all of a variant's graphs; a piecewise graph's pieces
    (``graph_0.piece_2``) count per piece (``"piece_2:8"``). The size is the first integer of
    the graph key outside its shapes (the dynamic dimension's value passed as an input: the
    batch of a decode step, the prompt length of a prefill), else the key's first integer."""
    out = {}
    for graph, keys in report.items():
        piece = graph.partition(".")[2]
        for key, entry in keys.items():
            m = re.search(r"\d+", re.sub(r"\([^()]*\)", "", key)) or re.search(r"\d+", key)
            if key != "*" and m:
                name = f"{piece}:{m.group()}" if piece else int(m.group())
                out[name] = out.get(name, 0) + entry.get("captures", 0)
    return out
