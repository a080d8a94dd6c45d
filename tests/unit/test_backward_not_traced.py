"""A backward that autograd runs under a user's compiled frame (``torch.autograd.grad`` inside
``torch.compile``) is compiled and run by this library without Dynamo tracing the library's
own frames (it would graph-break at every step of the compiler and the replay)."""
import pytest
import torch
import torch._dynamo.convert_frame as convert_frame

import torchair_dist
from torchair_dist import CompilerConfig


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_a_backward_under_a_compiled_frame_traces_only_user_code(monkeypatch, mode):
    traced = []
    inner = convert_frame._compile

    def spy(code, *args, **kwargs):
        traced.append(code.co_filename)
        return inner(code, *args, **kwargs)

    monkeypatch.setattr(convert_frame, "_compile", spy)

    def program(x, w):
        y = torch.nn.functional.conv2d(x, w, padding=1)
        gx, gw = torch.autograd.grad((y * y).sum(), (x, w))
        return y.detach(), gx, gw

    cfg = CompilerConfig()
    cfg.mode = mode
    torch._dynamo.reset()
    f = torch.compile(program, backend=torchair_dist.get_npu_backend(compiler_config=cfg))
    for n in range(3):
        torch.manual_seed(n)
        x = torch.randn(2, 3, 6, 6, requires_grad=True)
        w = torch.randn(4, 3, 3, 3, requires_grad=True)
        for got, want in zip(f(x, w), program(x, w)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    ours = sorted({path for path in traced if "torchair_dist" in path})
    assert not ours, f"Dynamo traced the library's frames: {ours}"
    assert traced, "the spy saw no frame (Dynamo's entry moved): the test would prove nothing"
