"""Cache entries and keys name process groups by their ranks (fake 4-rank world, this is rank 1).

Each "job" here is a fresh fake world whose groups are created in a different order, so c10d's
creation-order names point at other groups; the stored graph must be rebound by ranks, and an
entry whose group the job lacks must be refused.
"""
import os

import pytest
import torch
import torch.distributed as dist

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from torchair_dist.cache import graph_from_data, graph_to_data  # noqa: E402
from torchair_dist.cache.keys import call_key, input_signature, model_key  # noqa: E402
from torchair_dist.collectives import collective_ops  # noqa: E402,F401
from torchair_dist.collectives.groups import stable_name_of  # noqa: E402
from torchair_dist.configs import CompilerConfig  # noqa: E402
from torchair_dist.errors import CacheRejectedError  # noqa: E402

WORLD, RANK = 4, 1
c10d_fn = torch.ops._c10d_functional


def _job(layout):
    """A fresh fake world (c10d names start again at "0"), then ``layout``'s groups in order;
    returns {tuple(ranks): group} for the groups this rank is in."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=RANK, world_size=WORLD)
    made = {}
    for ranks in layout:
        g = dist.new_group(ranks)
        if RANK in ranks:
            made[tuple(ranks)] = g
    return made


@pytest.fixture(autouse=True)
def _teardown():
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _graph(c10d_name, stable_name):
    """x -> all_reduce over ``c10d_name`` (torch's op) -> send over ``stable_name`` (ours)."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    r = g.call_function(c10d_fn.all_reduce.default, (x, "sum", c10d_name))
    w = g.call_function(c10d_fn.wait_tensor.default, (r,))
    s = g.call_function(torch.ops.torchair_dist.send.default, (w, 0, 0),
                        {"group_name": stable_name})
    g.output((w, s))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _group_args(gm):
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    return nodes[0].args[2], nodes[2].kwargs["group_name"]


def test_entry_stores_ranks_and_is_rebound_in_a_job_with_other_creation_order():
    g12 = _job([[1, 2], [0, 1]])[(1, 2)]
    name_then = g12.group_name
    data = graph_to_data(_graph(name_then, stable_name_of(g12)))
    stored = [nd for nd in data["nodes"] if nd["op"] == "call_function"]
    assert stored[0]["args"]["t"][2] == {"group": {"ranks": [1, 2], "tag": "", "form": "c10d"}}
    assert stored[2]["kwargs"]["d"]["group_name"] == {
        "group": {"ranks": [1, 2], "tag": "", "form": "stable"}}
    # another job: two other groups first, so c10d's name of then now names [0, 1]
    made = _job([[0, 1], [1, 3], [1, 2]])
    assert made[(0, 1)].group_name == name_then
    c10d_now, stable_now = _group_args(graph_from_data(data))
    assert c10d_now == made[(1, 2)].group_name != name_then
    assert stable_now == "tag=;ranks=1,2"


def test_entry_whose_group_this_job_lacks_is_refused():
    g12 = _job([[1, 2]])[(1, 2)]
    data = graph_to_data(_graph(g12.group_name, stable_name_of(g12)))
    _job([[0, 1], [1, 3]])  # "1" exists again, but no group has ranks [1, 2]
    with pytest.raises(CacheRejectedError, match=r"ranks \[1, 2\].*new_group\(\[1, 2\]\)"):
        graph_from_data(data)


def test_malformed_group_record_is_refused():
    g12 = _job([[1, 2]])[(1, 2)]
    data = graph_to_data(_graph(g12.group_name, stable_name_of(g12)))
    node = next(nd for nd in data["nodes"] if nd["op"] == "call_function")
    node["args"]["t"][2] = {"group": {"ranks": ["1"], "tag": "", "form": "c10d"}}
    with pytest.raises(CacheRejectedError, match="malformed process-group record"):
        graph_from_data(data)


class _Holder(torch.nn.Module):
    def __init__(self, group):
        super().__init__()
        self.group = group
        self.lin = torch.nn.Linear(2, 2)


def test_keys_hash_group_ranks_not_names():
    cfg = CompilerConfig()
    made = _job([[1, 2], [0, 1]])
    torch.manual_seed(0)
    key_12 = model_key(_Holder(made[(1, 2)]), "forward", cfg, {})
    key_01 = model_key(_Holder(made[(0, 1)]), "forward", cfg, {})
    sig_12 = input_signature((made[(1, 2)],), {})
    assert key_12 != key_01, "modules holding different groups share a key"
    assert sig_12 != input_signature((made[(0, 1)],), {})
    made = _job([[0, 1], [1, 3], [1, 2]])  # same ranks, other c10d names
    assert model_key(_Holder(made[(1, 2)]), "forward", cfg, {}) == key_12
    assert model_key(_Holder(made[(0, 1)]), "forward", cfg, {}) == key_01
    assert input_signature((made[(1, 2)],), {}) == sig_12
    assert call_key((made[(1, 2)],), {})[1] == (type(made[(1, 2)]), "group:tag=;ranks=1,2")


def test_legacy_ops_drop_the_creation_order_tag():
    """Legacy ``c10d_functional`` ops select a group by (tag, ranks): c10d's default tag
    ``ptd:<name>`` is creation order and is not stored; the ranks select the group."""
    import torch.distributed._functional_collectives  # noqa: F401 - defines the legacy ops

    g12 = _job([[0, 1], [1, 2]])[(1, 2)]
    tag = dist.distributed_c10d._get_group_tag(g12)
    assert tag.startswith("ptd:")
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.ops.c10d_functional.all_reduce.default,
                             (x, "sum", tag, [1, 2], 2)))
    data = graph_to_data(torch.fx.GraphModule(torch.nn.Module(), g))
    node = next(nd for nd in data["nodes"] if nd["op"] == "call_function")
    assert node["args"]["t"][2] == ""
    _job([[1, 2]])
    rebuilt = next(n for n in graph_from_data(data).graph.nodes if n.op == "call_function")
    assert rebuilt.args[2:] == ("", [1, 2], 2)
