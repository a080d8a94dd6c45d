"""Inductor kernels and asynchronous collectives, in one process (a one-rank gloo group, whose
collectives still complete on gloo's own thread): the code inductor generates for the MoE
block of ``tests/multicard/moe_block.py`` never hands the input buffer of an
``all_to_all_v`` to another kernel (inductor's ``# reuse``) nor reads its output before the
``wait_tensor`` of that collective; a graph that reads a result before its wait is refused.
Tolerance vs eager: ATOL = 1e-5 (inductor's fused kernels round differently from aten's).
"""
import re

import pytest
import torch

import torchair_dist
from torchair_dist.backends.aclgraph import inductor_kernels

pytestmark = pytest.mark.usefixtures("one_rank_group")
ATOL = 1e-5


def _lifetime_violations(source: str):
    """Lines of inductor's ``call`` that touch an in-flight collective's input (a ``# reuse``
    or a kernel writing it through ``out=``) or read its output, between the collective and
    the ``wait_tensor`` of its result; the wrapper's aliases (``bufB = bufA``) are followed."""
    body = source[source.index("def call("):].splitlines()
    problems, in_flight = [], []  # [input name, names of the output, line of the collective]
    for i, line in enumerate(body):
        line = line.strip()
        m = re.match(r"(buf\d+) = torch\.ops\.torchair_dist\.\w+\.default\("
                     r"(?:reinterpret_tensor\()?(\w+)", line)
        if m:
            in_flight.append((m.group(2), {m.group(1)}, i))
            continue
        m = re.match(r"(buf\d+) = (buf\d+)$", line)
        if m and any(m.group(2) in outs for _, outs, _ in in_flight):
            for _, outs, _ in in_flight:
                if m.group(2) in outs:
                    outs.add(m.group(1))
            continue
        m = re.match(r"torch\.ops\._c10d_functional\.wait_tensor\.default\((buf\d+)\)", line)
        if m:
            in_flight = [c for c in in_flight if m.group(1) not in c[1]]
            continue
        if line.startswith(("del ", "assert_", "#")):
            continue
        names = set(re.findall(r"\b\w+\b", line))
        for inp, outs, at in in_flight:
            if inp in names and ("reuse" in line or "out=" in line):
                problems.append(f"input {inp} of the collective at line {at} touched: {line}")
            if outs & names:
                problems.append(f"output of the collective at line {at} read early: {line}")
    return problems


def _compile(model, overlap):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    cfg.experimental_config.inductor_kernels = True
    cfg.distributed_config.cpu_shm_collectives = False
    cfg.distributed_config.overlap_collectives = overlap
    return torch.compile(model, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                         fullgraph=True)


def _between_dispatch_and_wait(source: str):
    """The lines of ``call`` between the first ``all_to_all_v`` and the wait of its result."""
    body = [line.strip() for line in source[source.index("def call("):].splitlines()]
    start = next(i for i, line in enumerate(body) if "torchair_dist.all_to_all_v" in line)
    result = body[start].split(" = ")[0]
    end = next(i for i, line in enumerate(body) if i > start
               and line.startswith(f"torch.ops._c10d_functional.wait_tensor.default({result})"))
    return body[start + 1:end]


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "inorder"])
def test_moe_dispatch_buffer_is_not_reused_before_its_wait(overlap):
    """No buffer the dispatch owns is reused, written or read before its wait; with overlap on,
    the shared expert's matmuls still run between the dispatch and its wait (inductor's
    peak-memory reordering would move the wait up)."""
    from moe_block import MoEBlock, inputs

    from torch._inductor.codecache import PyCodeCache

    model = MoEBlock(0, 1).eval()
    before = len(PyCodeCache.modules)
    compiled = _compile(model, overlap)
    with torch.no_grad():
        for x in inputs(0, 3):
            assert (compiled(x) - model(x)).abs().max().item() <= ATOL
    sources = [open(m.__file__).read() for m in PyCodeCache.modules[before:]]
    calls = [s for s in sources if "torchair_dist.all_to_all_v" in s]
    assert len(calls) == 1, "inductor generated no module (or several) with the dispatch"
    source = calls[0]
    assert source.count("torch.ops.torchair_dist.all_to_all_v.default(") == 2
    assert _lifetime_violations(source) == []
    overlapped = [line for line in _between_dispatch_and_wait(source)
                  if line.startswith("extern_kernels.mm(")]
    if overlap:  # without overlap the order is inductor's own (torch 2.14 moves one matmul up)
        assert len(overlapped) == 2, _between_dispatch_and_wait(source)


def test_lifetime_check_sees_a_reused_dispatch_buffer():
    """The check above on the code inductor generated before the fix (abridged)."""
    source = """def call(self, args):
        buf10 = torch.ops.torchair_dist.all_to_all_v.default(buf8, [1], [0], [1], [0], 'g')
        buf11 = buf10
        del buf10
        buf12 = buf8; del buf8  # reuse
        extern_kernels.mm(arg1_1, arg2_1, out=buf12)
        torch.ops._c10d_functional.wait_tensor.default(buf11)
        cpp_fused_3(buf11, buf19)
"""
    problems = _lifetime_violations(source)
    assert len(problems) == 1 and "buf8" in problems[0], problems


def test_waited_library_ops_get_collective_lowerings():
    from torch._inductor.lowering import lowerings

    a2a = torch.ops.torchair_dist.all_to_all_v.default
    inductor_kernels.register_async_collectives([a2a, torch.ops.aten.add.Tensor])
    assert a2a in lowerings and a2a in inductor_kernels._async_lowered
    assert torch.ops.aten.add.Tensor not in inductor_kernels._async_lowered  # inductor's own


def test_a_read_before_the_wait_is_refused():
    wait = torch.ops._c10d_functional.wait_tensor.default
    g = torch.fx.Graph()
    x = g.placeholder("x")
    out = g.call_function(torch.ops.torchair_dist.all_to_all_v.default,
                          (x, [4], [0], [4], [0], "g"))
    early = g.call_function(torch.ops.aten.add.Tensor, (out, 1))
    done = g.call_function(wait, (out,))
    g.output((early, done))
    gm = torch.fx.GraphModule({}, g)
    assert inductor_kernels.waited_ops(gm) == [torch.ops.torchair_dist.all_to_all_v.default]
    with pytest.raises(inductor_kernels.InductorKernelsError, match="before its wait"):
        inductor_kernels.check_waits(gm.graph, "g0")
