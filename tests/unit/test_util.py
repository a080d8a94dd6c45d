"""Ground-floor helpers (torchair_dist/base/util.py), shared by the packages above it."""
import torch

from torchair_dist.base import util
from torchair_dist.passes import overlap


def test_op_name_and_its_parts():
    add = torch.ops.aten.add
    assert util.op_name(add.Tensor) == "aten::add" == util.op_name(add)
    assert util.namespace_and_name(add.Tensor) == ("aten", "add")
    assert util.namespace_and_name(torch.ops._c10d_functional.all_reduce) == (
        "_c10d_functional", "all_reduce")
    assert util.op_name(torch.add) == "" and util.namespace_and_name(torch.add) == (None, None)
    assert overlap._namespace_and_name is util.namespace_and_name


def test_input_device_skips_meta_and_non_tensors():
    assert util.input_device([3, torch.empty(1, device="meta"), torch.ones(1)]) == \
        torch.device("cpu")
    assert util.input_device([]) == torch.device("cpu")


def test_rank_and_world():
    import torch.distributed as dist

    expected = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    assert util.current_rank_and_world() == expected
