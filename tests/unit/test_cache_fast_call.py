"""The cache's per-call path: a flat call skips the pytree key and the pytree maps.

``fast_key`` must tell apart every pair of calls ``call_key`` tells apart (else a call would
run an entry compiled for other shapes); a loaded entry's generated call must give what the
general path gives, read the module's current parameters, and step aside for calls it does
not cover (kwargs, nested arguments, views and constants in the result).
"""
import pytest
import torch
import torch.nn as nn

import torchair_dist
from torchair_dist.cache.keys import call_key, fast_key


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(8, 8, generator=g))

    def forward(self, x, k: int = 1):
        return x @ self.w * k, x


class Nested(nn.Module):
    def forward(self, pair):
        return {"sum": pair[0] + pair[1]}


def _pair(tmp_path, module):
    """(first-process function, warm function loaded from its entry) over one cache dir."""
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    make = lambda: torchair_dist.cache_compile(module.forward, config=cfg,  # noqa: E731
                                               cache_dir=str(tmp_path / "c"))
    return make, cfg


def _entry(fn):
    (loaded,) = fn.loaded.values()
    return loaded


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def test_fast_key_separates_what_call_key_separates():
    a = torch.randn(4, 8)
    calls = [(a,), (a.t().contiguous().t(),), (a.double(),), (a[:2],), (a, 1), (a, True),
             (a, 1.0), (a, 2), (a, None), (a, "x"), (a, a)]
    fast = [fast_key(c) for c in calls]
    full = [call_key(c, {}) for c in calls]
    for i in range(len(calls)):
        for j in range(len(calls)):
            if full[i] != full[j]:
                assert fast[i] != fast[j], (calls[i], calls[j])
    assert fast_key((a.clone(),)) == fast_key((a,))  # new values, same key
    assert fast_key(([a],)) is None and fast_key((nn.Linear(2, 2),)) is None


def test_warm_entry_runs_the_generated_call_and_reads_new_inputs(tmp_path):
    net = Affine().eval()
    make, _ = _pair(tmp_path, net)
    cold = make()
    out, same = cold(X, 3)
    assert torch.equal(out, X @ net.w.detach() * 3) and same is X
    warm = make()
    y = torch.randn(4, 8)
    out, same = warm(y, 3)
    assert warm.last_source == "cache" and not warm.rejections
    entry = _entry(warm)
    assert entry.fast is not None, "a flat call with tuple output takes the generated call"
    with torch.no_grad():
        assert torch.equal(out, y @ net.w * 3) and same is y
    out, _ = warm(X, 3)
    assert warm.last_source == "memory" and torch.equal(out, X @ net.w.detach() * 3)
    assert warm._by_fast_key, "the second call is answered by the fast key"
    # a parameter swapped for another tensor is read, as on the general path
    with torch.no_grad():
        net.w = nn.Parameter(net.w * 2)
        assert torch.equal(warm(X, 3)[0], X @ net.w * 3)
    # grad mode is the caller's again afterwards
    assert torch.is_grad_enabled()


def test_a_new_scalar_or_shape_is_a_new_entry_not_the_old_one(tmp_path):
    net = Affine().eval()
    make, _ = _pair(tmp_path, net)
    fn = make()
    fn(X, 3)
    fn(X, 3)
    assert fn.last_source == "memory"
    with torch.no_grad():
        assert torch.equal(fn(X, 5)[0], X @ net.w * 5)
        assert fn.last_source == "compiled"
        assert torch.equal(fn(X[:2], 5)[0], X[:2] @ net.w * 5)
        assert fn.last_source == "compiled"
        assert torch.equal(fn(X, True)[0], X @ net.w * True)
        assert fn.last_source == "compiled"
    assert len(fn.loaded) == 4


def test_calls_the_generated_call_does_not_cover_take_the_general_path(tmp_path):
    net = Affine().eval()
    make, _ = _pair(tmp_path, net)
    make()(X, k=2)
    warm = make()
    out, same = warm(X, k=2)  # kwargs: no fast key, general entry path
    assert warm.last_source == "cache" and _entry(warm).fast is None
    assert torch.equal(out, X @ net.w.detach() * 2) and same is X
    assert not warm._by_fast_key

    nested = Nested()
    make, _ = _pair(tmp_path / "n", nested)
    a, b = torch.randn(3), torch.randn(3)
    make()((a, b))
    warm = make()
    assert torch.equal(warm((a, b))["sum"], a + b)
    assert warm.last_source == "cache" and _entry(warm).fast is None


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_generated_call_equals_the_general_path(tmp_path, mode):
    net = Affine().eval()
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    make = lambda: torchair_dist.cache_compile(net.forward, config=cfg,  # noqa: E731
                                               cache_dir=str(tmp_path / "c"))
    make()(X, 2)
    warm = make()
    warm(X, 2)
    entry = _entry(warm)
    fast, entry.fast = entry.fast, None
    general = [t.clone() for t in entry((X, 2), {})]
    entry.fast = fast
    got = entry((X, 2), {})
    assert torch.equal(got[0], general[0]) and got[1] is X
