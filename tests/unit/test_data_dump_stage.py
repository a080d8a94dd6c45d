"""dump_config.data_dump_stage: the per-op data dump of the graph before ("original") or
after ("optimized", default) the pipeline's passes, in both mode families."""
import glob
import os

import numpy
import pytest
import torch

import torchair_dist


def _dumped(tmp_path, mode, stage, fn, args):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    cfg.debug.data_dump.type = "npy"
    cfg.debug.data_dump.path = str(tmp_path / stage)
    if stage != "default":
        cfg.dump_config.data_dump_stage = stage
    compiled = torch.compile(fn, backend=torchair_dist.get_npu_backend(compiler_config=cfg),
                             fullgraph=True)
    assert torch.equal(compiled(*args), fn(*args))
    files = sorted(glob.glob(str(tmp_path / stage / "rank_0" / "graph_*" / "*.npy")))
    return {os.path.basename(f).split("_", 1)[1][:-len(".npy")]: numpy.load(f) for f in files}


def cat_of_products(a, b, x):
    return torch.cat([a @ b, x + 1], 0) * 2  # remove_cat_ops rewrites the cat (ACL modes)


def noop_expand(x):
    return (x + 1).expand(x.shape) * 2  # remove_noop_ops drops the expand


@pytest.mark.parametrize("mode, fn, args, changed, added", [
    ("npugraph_ex", cat_of_products, (torch.randn(3, 4), torch.randn(4, 5), torch.randn(2, 5)),
     "cat", "mm_out"),
    ("max-autotune", noop_expand, (torch.randn(2, 3),), "expand", None),
])
def test_original_and_optimized_dump_their_own_graph(tmp_path, mode, fn, args, changed, added):
    original = _dumped(tmp_path, mode, "original", fn, args)
    optimized = _dumped(tmp_path, mode, "optimized", fn, args)
    default = _dumped(tmp_path, mode, "default", fn, args)
    assert changed in original and changed not in optimized
    if added:
        assert added in optimized and added not in original
    assert sorted(default) == sorted(optimized)
    # both graphs compute the same result: the last op's dump (files in node order) is it
    assert numpy.array_equal(list(original.values())[-1], fn(*args).numpy())
    assert numpy.array_equal(list(optimized.values())[-1], fn(*args).numpy())


def test_stage_without_data_dump_is_named_in_the_warning():
    cfg = torchair_dist.CompilerConfig()
    cfg.dump_config.data_dump_stage = "original"
    with pytest.warns(UserWarning, match=r"config\.dump_config\.data_dump_stage='original' "
                                         r"\(only when debug\.data_dump\.type is on\)"):
        torchair_dist.get_npu_backend(compiler_config=cfg)
