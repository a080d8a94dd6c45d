"""The program suite: every program of ``catalogue.py`` in every mode, static and dynamic,
compared with eager on what a caller can observe (issue 41).

Per call (three calls: the first captures or compiles, the later ones replay; dynamic runs
change sizes between calls), on inputs built identically for eager and compiled:

* errors: where eager raises, the compiled call raises an instance of eager's class;
* outputs: the same structure; per tensor the dtype, sizes, strides of every dim with more
  than one element, storage offset, and values (exact for integers and bools, else
  ``torch.testing.assert_close``'s default tolerance: decompositions reorder float math);
* aliasing: which inputs each output shares memory with, and which outputs share memory
  with each other, are eager's;
* inputs and module buffers after the call: values, and version counters bumped as often.

A mode may refuse a program with a clear error only where the program's ``refused`` says so;
any other difference fails.
"""
from __future__ import annotations

from typing import Any, List, Tuple

import pytest
import torch
import torch.utils._pytree as pytree

import torchair_dist
from torchair_dist.errors import TorchairDistError

from catalogue import PROGRAMS, Program  # noqa: E402  (tests/programs on sys.path by pytest)

MODES = ("npugraph_ex", "max-autotune", "reduce-overhead")
CALLS = 3

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _case(prog: Program, mode: str, dynamic: bool):
    why = prog.known_wrong.get((mode, dynamic))
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(prog, mode, dynamic, marks=marks,
                        id=f"{prog.name}-{mode}-{'dynamic' if dynamic else 'static'}")


def _cases():
    for prog in PROGRAMS:
        for mode in MODES:
            yield _case(prog, mode, False)
            if prog.dynamic_sizes and mode != "reduce-overhead":
                yield _case(prog, mode, True)


def _backend(mode: str):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    return torchair_dist.get_npu_backend(compiler_config=cfg)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _aliasing(outs: List[Any], inputs: List[Any]) -> List[Tuple]:
    """Per tensor output: the input positions and the earlier output positions it shares
    memory with (empty tensors share nothing that can be observed)."""
    found = []
    ins = [(i, _storage(x)) for i, x in enumerate(inputs)
           if isinstance(x, torch.Tensor) and x.numel()]
    seen: List[Tuple[int, int]] = []
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor) or not out.numel():
            found.append(None)
            continue
        ptr = _storage(out)
        found.append((tuple(i for i, p in ins if p == ptr), tuple(j for j, p in seen if p == ptr)))
        seen.append((k, ptr))
    return found


def _compare_tensor(where: str, e: torch.Tensor, c: torch.Tensor) -> None:
    assert c.dtype == e.dtype, f"{where}: dtype {c.dtype}, eager {e.dtype}"
    assert c.shape == e.shape, f"{where}: shape {tuple(c.shape)}, eager {tuple(e.shape)}"
    if e.numel() == 0:
        return
    assert c.storage_offset() == e.storage_offset(), (
        f"{where}: storage offset {c.storage_offset()}, eager {e.storage_offset()}")
    significant = [d for d in range(e.dim()) if e.size(d) > 1]
    assert [c.stride(d) for d in significant] == [e.stride(d) for d in significant], (
        f"{where}: strides {c.stride()}, eager {e.stride()}")
    if e.dtype.is_floating_point or e.dtype.is_complex:
        torch.testing.assert_close(c, e, equal_nan=True, msg=lambda m: f"{where}: {m}")
    else:
        assert torch.equal(c, e), f"{where}: values {c.flatten()[:8].tolist()}, eager " \
                                  f"{e.flatten()[:8].tolist()}"


def _compare_outputs(call: int, e_out, c_out, e_in, c_in) -> None:
    e_flat, e_spec = pytree.tree_flatten(e_out)
    c_flat, c_spec = pytree.tree_flatten(c_out)
    assert c_spec == e_spec, f"call {call}: output structure {c_spec}, eager {e_spec}"
    for k, (e, c) in enumerate(zip(e_flat, c_flat)):
        if isinstance(e, torch.Tensor):
            assert isinstance(c, torch.Tensor), f"call {call} output {k}: {type(c)}"
            _compare_tensor(f"call {call} output {k}", e, c)
        else:
            assert c == e, f"call {call} output {k}: {c!r}, eager {e!r}"
    assert _aliasing(c_flat, c_in) == _aliasing(e_flat, e_in), (
        f"call {call}: aliasing (inputs, earlier outputs) per output "
        f"{_aliasing(c_flat, c_in)}, eager {_aliasing(e_flat, e_in)}")


def _compare_state(call: int, what: str, eager: List[Any], ours: List[Any],
                   e_versions: List[int], c_versions: List[int]) -> None:
    for i, (e, c) in enumerate(zip(eager, ours)):
        if isinstance(e, torch.Tensor):
            _compare_tensor(f"call {call} {what} {i} after the call", e, c)
    assert c_versions == e_versions, (
        f"call {call}: {what} version counters {c_versions}, eager {e_versions}")


def _versions(values: List[Any]) -> List[int]:
    return [v._version if isinstance(v, torch.Tensor) else -1 for v in values]


def _buffers(module: torch.nn.Module) -> List[torch.Tensor]:
    return list(module.buffers())


def _run(fn, args):
    try:
        return fn(*args), None
    except Exception as exc:  # noqa: BLE001 - compared with the other side's
        return None, exc


def _check_program(prog: Program, mode: str, dynamic: bool) -> None:
    torch.manual_seed(0)
    if prog.module is not None:
        eager_module, our_module = prog.module(), prog.module()
        our_module.load_state_dict(eager_module.state_dict())
        eager_fn = eager_module
        state = _buffers
        compiled = torch.compile(our_module, backend=_backend(mode), dynamic=dynamic)
    else:
        eager_module = our_module = None
        eager_fn = prog.fn
        state = None
        compiled = torch.compile(prog.fn, backend=_backend(mode), dynamic=dynamic)
    for call in range(CALLS):
        # a static run of a program whose sizes change with n keeps call 0's sizes
        n = call if dynamic or not prog.dynamic_sizes else 0
        e_in, c_in = prog.inputs(n), prog.inputs(n)
        e_before, c_before = _versions(e_in), _versions(c_in)
        if state is not None:
            e_state_before = _versions(state(eager_module))
            c_state_before = _versions(state(our_module))
        e_out, e_err = _run(eager_fn, e_in)
        c_out, c_err = _run(compiled, c_in)
        if c_err is not None and prog.refused.get(mode):
            assert isinstance(c_err, (TorchairDistError, torch._dynamo.exc.BackendCompilerFailed))
            return
        if e_err is not None:
            assert c_err is not None, (f"call {call}: eager raises {type(e_err).__name__}: "
                                       f"{e_err}; compiled returned {c_out!r}")
            assert isinstance(c_err, type(e_err)), (
                f"call {call}: eager raises {type(e_err).__name__}, compiled "
                f"{type(c_err).__name__}: {c_err}")
            continue
        if c_err is not None:
            raise AssertionError(f"call {call}: compiled raised {type(c_err).__name__}: "
                                 f"{c_err}") from c_err
        _compare_outputs(call, e_out, c_out, e_in, c_in)
        _compare_state(call, "input", e_in, c_in,
                       [v - b for v, b in zip(_versions(e_in), e_before)],
                       [v - b for v, b in zip(_versions(c_in), c_before)])
        if state is not None:
            e_state, c_state = state(eager_module), state(our_module)
            _compare_state(call, "buffer", e_state, c_state,
                           [v - b for v, b in zip(_versions(e_state), e_state_before)],
                           [v - b for v, b in zip(_versions(c_state), c_state_before)])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("prog,mode,dynamic", list(_cases()))
def test_program_equals_eager(prog, mode, dynamic, fresh_dynamo):
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=prog.data_dependent):
        _check_program(prog, mode, dynamic)
