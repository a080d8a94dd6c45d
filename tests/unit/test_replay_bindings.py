"""The record replay re-issues aten calls through torch's Python bindings where a probe proves
they dispatch the same call (cpu/bindings.py), and passes a Python number as a
0-dim tensor only where the result type provably stays the same."""
import pytest
import torch

from torchair_dist import CompilerConfig, get_npu_backend
from torchair_dist.cpu import bindings

aten = torch.ops.aten
VF = torch._C._VariableFunctions

pytestmark = pytest.mark.usefixtures("record_capture")


def test_a_plain_op_gets_its_binding():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    fn, args = bindings.fast_call(aten.mm.default, (a, b), {})
    assert fn is VF.mm and args == (a, b)
    out = torch.empty(2, 4)
    fn, _ = bindings.fast_call(aten.mm.out, (a, b), {"out": out})
    assert fn is VF.mm


def test_an_op_without_a_binding_keeps_its_dispatcher_entry():
    x = torch.randn(4, 4)
    fn, args = bindings.fast_call(aten.slice.Tensor, (x, 1, 0, 2), {})
    assert fn is aten.slice.Tensor._op and args == (x, 1, 0, 2)
    # non-aten ops are never probed
    op = torch.ops.torchair_dist.all_gather.default
    assert bindings.fast_call(op, (), {})[0] is op._op


def test_a_binding_that_decomposes_is_not_used():
    # F.linear's binding reaches aten.linear; recorded as addmm/mm, linear's binding does not
    # dispatch that call, so the probe rejects it.
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    fn, _ = bindings.fast_call(aten.t.default, (w,), {})
    assert fn in (VF.t, torch._C.TensorBase.t)
    assert not bindings._dispatches(torch._C._nn.linear, aten.addmm.default, (x, w), {})


def test_a_probe_runs_nothing():
    x = torch.zeros(3)
    out = torch.zeros(3)
    bindings.fast_call(aten.add_.Tensor, (x, 1), {})
    bindings.fast_call(aten.add.out, (x, 5), {"out": out})
    assert torch.equal(x, torch.zeros(3)) and torch.equal(out, torch.zeros(3))


@pytest.mark.parametrize("self_, number, held, binding", [
    (torch.randn(4), 1, True, True),                           # float tensor + int
    (torch.randn(4), 0.25, True, True),                        # float tensor + float
    (torch.randn(4, dtype=torch.float16), 1e-3, True, True),   # half + float: stays half
    (torch.arange(4, dtype=torch.int32), 2, True, True),       # int32 + int: stays int32
    (torch.arange(4, dtype=torch.int32), 2.5, False, True),    # int + float: default dtype
    (torch.tensor(3.0), 1, False, True),                       # 0-dim self
    (torch.randn(4), float("nan"), False, True),                # not representable as equal
    (torch.arange(4), 2 ** 70, False, False),                  # beyond int64: no binding takes it
])
def test_a_number_is_prewrapped_only_when_the_result_type_is_the_same(self_, number, held,
                                                                      binding):
    fn, args = bindings.fast_call(aten.add.Tensor, (self_, number), {})
    assert (fn is VF.add) is binding
    assert isinstance(args[1], torch.Tensor) is held
    if held:
        assert args[1].dim() == 0 and args[1].item() == number
        assert torch.result_type(self_, args[1]) == torch.result_type(self_, number)
        assert torch.equal(fn(*args), self_ + number)


def _compile(fn):
    cfg = CompilerConfig()
    cfg.mode = "npugraph_ex"
    return torch.compile(fn, backend=get_npu_backend(compiler_config=cfg), fullgraph=True)


CASES = {
    "int32_times_float": (lambda x: (x * 2.5, x + 3), lambda: torch.randint(-9, 9, (5,),
                                                                           dtype=torch.int32)),
    "half_plus_small": (lambda x: x + 1e-3, lambda: torch.randn(6).half()),
    "zero_dim_plus_int": (lambda x: x + 1, lambda: torch.randn(())),
    "mixed_chain": (lambda x: torch.relu(x @ x.t()).sum(1) * 0.5 - 2,
                    lambda: torch.randn(4, 4)),
    "bool_mask": (lambda x: torch.where(x > 0, x, x * 3), lambda: torch.randn(7)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_through_bindings_equals_eager_exactly(runners, name):
    fn, make = CASES[name]
    f = _compile(fn)
    for _ in range(4):
        x = make()
        got, want = f(x), fn(x)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), (name, g, w)
    graph = next(iter(runners[0].captures.values())).graph
    assert graph.run is not None
    # the record's calls are mostly bindings; none of the element-wise ops kept _op
    consts = [c for c in graph._consts if callable(c) and not isinstance(c, torch.Tensor)]
    assert any(c in (VF.add, VF.mul, VF.sub, VF.relu, VF.where, VF.mm) for c in consts), \
        graph.source
