"""Hugging Face causal LMs sharded by transformers' own tensor parallelism, decoded greedily
with a static KV cache: the pieces the demo, the model tests and the coverage script share.

* :func:`save_tiny` writes a tiny random model of any ``model_type`` to a directory (no
  download); :func:`load_tp` loads it on every rank with ``tp_plan="auto"`` (the process group
  must exist: gloo on CPU).
* Two ways of driving decode, both greedy and both returning the generated tokens:
  :func:`generate_tokens` (``model.generate(cache_implementation="static", compile_config=...)``)
  and :func:`static_cache_loop` (an explicit loop over a ``StaticCache``: eager prefill, then
  one ``step(...)`` per token, e.g. ``torch.compile(model.forward, fullgraph=True)``).
* :class:`CompileStats` counts what a block compiled: Dynamo frames, graphs our compiler
  received, recompiles, and ACL-graph captures/replays.
"""
from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from typing import Callable, Dict, List, Optional

import torch

from tiny_config import TINY, tiny_config  # noqa: F401  (re-exported: the demo, the tests)


def save_tiny(model_type: str, path: str, seed: int = 0, **overrides) -> str:
    """Save a randomly initialised tiny ``model_type`` causal LM (float32) to ``path``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = tiny_config(model_type, **overrides)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(path)
    return path


def load_tp(path: str):
    """Load ``path`` sharded with transformers' TP (``tp_plan="auto"``) over the default
    process group, eval mode; EOS is switched off so every run generates the same count."""
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # tp_plan= (a DistributedConfig later)
        model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def npu_backend(mode: str):
    """``torchair_dist.get_npu_backend`` for ``mode``."""
    import torchair_dist

    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # reduce-overhead is deprecated
        return torchair_dist.get_npu_backend(compiler_config=cfg)


def prompt_ids(batch: int, length: int, vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------ driving decode
def generate_tokens(model, ids: torch.Tensor, new_tokens: int, backend=None,
                    cache=None) -> torch.Tensor:
    """Greedy ``model.generate`` with a static cache; decode steps compiled with ``backend``
    (``fullgraph=True``) unless None. Returns the new tokens ``[batch, new_tokens]``.

    Without ``cache``, ``cache_implementation="static"``: transformers allocates a new
    ``StaticCache`` per call. A ``cache`` from :func:`new_static_cache` is reset and reused."""
    from transformers import CompileConfig

    kwargs = {}
    if backend is not None:
        cc = CompileConfig(backend=backend, fullgraph=True, mode=None)
        cc._compile_all_devices = True  # transformers compiles on accelerators only otherwise
        kwargs["compile_config"] = cc
    else:
        kwargs["disable_compile"] = True
    if cache is None:
        kwargs["cache_implementation"] = "static"
    else:
        cache.reset()
        kwargs["cache"] = cache
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
    return out[:, ids.shape[1]:]


def new_static_cache(model, ids: torch.Tensor, new_tokens: int):
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=ids.shape[1] + new_tokens)


def static_cache_loop(model, ids: torch.Tensor, new_tokens: int, step: Optional[Callable] = None,
                      before_step: Optional[Callable[[int], None]] = None, cache=None):
    """Greedy decode over an explicit ``StaticCache``: eager prefill of the prompt, then
    ``new_tokens - 1`` calls of ``step`` (default ``model.forward``) on one token each.

    Returns (tokens ``[batch, new_tokens]``, per-step seconds, last-position logits per token).
    ``before_step(i)`` runs before step ``i`` is timed (a barrier, progress). A ``cache`` from
    :func:`new_static_cache` is reset and reused (its buffers stay where they are, so an
    ACL-graph capture of the step is replayed), else a new one is made."""
    step = step or model.forward
    plen = ids.shape[1]
    if cache is None:
        cache = new_static_cache(model, ids, new_tokens)
    else:
        cache.reset()
    with torch.no_grad():
        positions = torch.arange(plen)
        out = model(input_ids=ids, cache=cache, use_cache=True, cache_position=positions,
                    position_ids=positions[None].expand(ids.shape[0], -1))
        logits = [out.logits[:, -1].clone()]
        tokens = [logits[-1].argmax(-1)]
        times: List[float] = []
        for i in range(1, new_tokens):
            if before_step:
                before_step(i)
            t0 = time.perf_counter()
            position = torch.tensor([plen + i - 1])
            out = step(input_ids=tokens[-1][:, None], cache=cache, use_cache=True,
                       cache_position=position,
                       position_ids=position[None].expand(ids.shape[0], -1))
            times.append(time.perf_counter() - t0)
            logits.append(out.logits[:, -1].clone())
            tokens.append(logits[-1].argmax(-1))
    return torch.stack(tokens, 1), times, logits


def compiled_forward(model, backend):
    return torch.compile(model.forward, backend=backend, fullgraph=True)


# ----------------------------------------------------------------------- compile stats
class CompileStats:
    """Inside ``with CompileStats() as s:``: Dynamo frames compiled, graphs our compiler
    received, recompiles (frames beyond the first), and the ACL-graph
    runners' captures/replays (None when no runner captured: max-autotune, or no device
    graph on CPU without ``TORCHAIR_DIST_CPU_CAPTURE=emulate``)."""

    def __enter__(self):
        from torch._dynamo.utils import counters

        from torchair_dist.pipeline.route import record_graphs

        self._counters = counters
        self._frames0 = counters["stats"]["unique_graphs"]
        self._record = record_graphs()
        self.graphs = self._record.__enter__()
        self.runners: list = []
        self._frames1 = None
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_watch_acl_runners(self.runners))
        return self

    def __exit__(self, *exc):
        self._frames1 = self._counters["stats"]["unique_graphs"]
        self._stack.close()
        self._record.__exit__(*exc)
        return False

    @property
    def frames(self) -> int:
        end = self._frames1
        if end is None:  # still inside the block
            end = self._counters["stats"]["unique_graphs"]
        return end - self._frames0

    @property
    def recompiles(self) -> int:
        """Frames beyond the first (the block is meant to compile one function once)."""
        return max(0, self.frames - 1)

    @property
    def captures(self) -> Optional[int]:
        runners = [r for r in self.runners if hasattr(r, "capture_count")]
        return sum(r.capture_count for r in runners) if runners else None

    def as_row(self) -> Dict[str, object]:
        return dict(frames=self.frames, graphs=len(self.graphs), recompiles=self.recompiles,
                    captures=self.captures)


@contextlib.contextmanager
def _watch_acl_runners(runners: list):
    """Record every runner the ACL-graph backend builds inside the block (for its
    ``capture_count``); the backend object's ``finish`` is wrapped, then restored."""
    from torchair_dist.backends import aclgraph

    backend = aclgraph.BACKEND
    original = backend.finish

    def recording(build):
        compiled = original(build)
        runners.append(compiled.runner)
        return compiled

    backend.finish = recording
    try:
        yield runners
    finally:
        del backend.finish  # the class's method again


def median_us(times: List[float]) -> float:
    return statistics.median(times) * 1e6 if times else float("nan")


# ------------------------------------------------------------------- coverage (per rank)
def one_line(exc: BaseException, limit: int = 110) -> str:
    """An exception in one line: the ops without a GE converter when that is the cause, else
    the innermost error's type and first message line (with no message: where it was raised,
    and the innermost transformers line that led there)."""
    import re

    if not str(exc).strip():
        return f"{type(exc).__name__} (no message) {_raised_where(exc)}"[:max(limit, 180)]
    text = f"{type(exc).__name__}: {exc}"
    ops = re.findall(r"^\s+(\S+) \(FX node", text, re.M)
    if ops:
        return "no GE converter: " + ", ".join(dict.fromkeys(ops))
    guard = re.search(r"data-dependent expression.*?Caused by: (.+?)\s+# (\S+?:\d+)", text, re.S)
    if guard:  # Dynamo cannot branch on a value known only at run time: name that line
        return f"data-dependent branch `{guard.group(1).strip()}` ({guard.group(2)})"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    inner = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Failure)\b", ln)]
    line = inner[-1] if inner else lines[0]
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _raised_where(exc: BaseException) -> str:
    """'in <function> (<file>:<line>), from <transformers file>:<line>' for ``exc``."""
    import os
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""

    def short(frame):
        parts = frame.filename.replace(os.sep, "/").split("/site-packages/")
        return f"{parts[-1]}:{frame.lineno}"

    where = f"in {frames[-1].name} ({short(frames[-1])})"
    ours = [f for f in frames if "/transformers/models/" in f.filename.replace(os.sep, "/")]
    return where + (f", from {short(ours[-1])}" if ours else "")


def _forward_check(model, ids, backend, atol):
    """(a) the full forward compiled with fullgraph=True vs eager: '' when ok."""
    def logits(input_ids):
        return model(input_ids=input_ids, use_cache=False).logits

    torch._dynamo.reset()
    with torch.no_grad():
        expected = logits(ids)
        with CompileStats() as stats:
            got = torch.compile(logits, backend=backend, fullgraph=True)(ids)
    diff = (got - expected).abs().max().item()
    if stats.frames != 1 or len(stats.graphs) != 1:
        return f"forward: {stats.frames} frames, {len(stats.graphs)} graphs"
    return f"forward: logits differ by {diff:.1e}" if not diff <= atol else ""


def _decode_check(model, ids, new_tokens, backend, atol, expected, frames=1):
    """(b) static-cache decode steps compiled with fullgraph=True vs eager: '' when ok.
    ``frames``: the Dynamo frames torch's own eager backend needs for the same steps."""
    eager_tokens, eager_logits = expected
    torch._dynamo.reset()
    with CompileStats() as stats:
        tokens, _, logits = static_cache_loop(model, ids, new_tokens,
                                              compiled_forward(model, backend))
    if stats.frames != frames or len(stats.graphs) != frames:
        return (f"decode: {stats.frames} frames, {len(stats.graphs)} graphs "
                f"(torch's eager backend: {frames})")
    if not torch.equal(tokens, eager_tokens):
        return "decode: tokens differ from eager"
    diff = max((a - b).abs().max().item() for a, b in zip(logits, eager_logits))
    return f"decode: logits differ by {diff:.1e}" if not diff <= atol else ""


def coverage_case(rank, world, path, modes, new_tokens=4, atol=1e-4):
    """On every rank: load ``path`` with transformers' TP, run eager forward and static-cache
    decode, and the decode compiled by torch's own ``eager`` backend with ``fullgraph=True``
    (failures there: ``{"excluded": reason}``), then per mode the compiled forward and
    decode vs eager: ``{"modes": {mode: "ok" | one-line error}}``."""
    torch.set_num_threads(1)
    stage = "load"
    try:
        model = load_tp(path)
        ids = prompt_ids(2, 6, model.config.vocab_size)
        stage = "eager forward"
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        stage = "eager StaticCache decode"
        eager_tokens, _, eager_logits = static_cache_loop(model, ids, new_tokens)
    except Exception as exc:  # transformers' own TP or eager fails here: excluded
        return {"excluded": f"transformers TP/eager ({stage}): " + one_line(exc)}
    try:
        decode_frames = _reference_decode_frames(model, ids, new_tokens)
    except Exception as exc:  # no backend can capture transformers' code in one graph
        torch._dynamo.reset()
        return {"excluded": "fullgraph fails with torch's own eager backend: " + one_line(exc)}
    cells = {}
    for mode in modes:
        backend = npu_backend(mode)
        try:
            problems = [_forward_check(model, ids, backend, atol),
                        _decode_check(model, ids, new_tokens, backend, atol,
                                      (eager_tokens, eager_logits), decode_frames)]
            cells[mode] = "; ".join(p for p in problems if p) or "ok"
        except Exception as exc:
            cells[mode] = one_line(exc)
    torch._dynamo.reset()
    row = {"modes": cells}
    if decode_frames != 1:
        row["decode_frames"] = (f"decode compiles {decode_frames} frames for {new_tokens - 1} "
                                f"steps with torch's own 'eager' backend too (transformers' "
                                f"cache guards on a Python int); checked: the same count")
    return row


def _reference_decode_frames(model, ids, new_tokens) -> int:
    """Dynamo frames the static-cache decode needs with torch's ``eager`` backend: more than
    one means transformers' code recompiles whatever the backend (e.g. the sliding-window
    cache's ``cumulative_length_int``)."""
    torch._dynamo.reset()
    with CompileStats() as stats:
        static_cache_loop(model, ids, new_tokens, compiled_forward(model, "eager"))
    return stats.frames
