"""torchair_dist.cache_compile: round trip, and every way an entry must be refused.

A refused entry (corrupt, foreign-owned, wrong permissions, tampered, stale, symlinked) is
reported (a ``CacheRejectedError`` in ``fn.rejections`` and a logged warning), recompiled and
never executed: the tests make the stored graph compute something else (``add`` -> ``sub``)
where that matters, so running it would show in the result.
"""
import hashlib
import json
import logging
import multiprocessing as mp
import os
import types
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchair_dist
from torchair_dist import cache as cache_mod
from torchair_dist.errors import CacheRejectedError, ConfigError

OTHER_UID = 54321


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 8)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        self.register_buffer("shift", torch.full((8,), 0.5))

    def forward(self, x, scale: float = 1.0):
        h = self.b(F.gelu(self.a(x))) * scale + self.shift
        return {"h": h, "parts": (h[:, :2], None, 7)}


X = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))


def make(tmp_path, mode="npugraph_ex", net=None):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    net = net or Net().eval()
    return net, torchair_dist.cache_compile(net.forward, config=cfg,
                                            cache_dir=str(tmp_path / "c"))


def check(net, out):
    with torch.no_grad():
        ref = net(X)
    assert torch.equal(out["h"], ref["h"])
    assert torch.equal(out["parts"][0], ref["parts"][0]) and out["parts"][1:] == (None, 7)


@pytest.fixture
def warnings_log(caplog):
    logger = logging.getLogger("torchair_dist")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


@pytest.fixture
def saved(tmp_path):
    """A cache directory holding one entry for Net on X; returns (dir, entry path, index path)."""
    net, fn = make(tmp_path)
    check(net, fn(X))
    assert fn.last_source == "compiled"
    d = fn.directory()
    (entry,) = [f for f in os.listdir(d) if f.startswith("entry-")]
    return d, os.path.join(d, entry), os.path.join(d, "index.json")


def reload_and_expect_rejection(tmp_path, warnings_log, match):
    net, fn = make(tmp_path)
    out = fn(X)
    check(net, out)
    assert fn.last_source == "compiled", "a refused entry must be recompiled"
    assert fn.rejections and isinstance(fn.rejections[0], CacheRejectedError)
    assert match in str(fn.rejections[0]), fn.rejections[0]
    assert "rejected entry" in warnings_log.text
    return fn


def rewrite_entry(entry, index, edit, fix_hash):
    data = json.loads(open(entry).read())
    edit(data)
    raw = json.dumps(data).encode()
    cache_mod.write_atomic(entry, raw)
    if fix_hash:
        idx = json.loads(open(index).read())
        for rec in idx["entries"].values():
            rec["sha256"] = hashlib.sha256(raw).hexdigest()
        cache_mod.write_atomic(index, json.dumps(idx).encode())


def poison(data):
    """Make the stored graph compute something else, so running it would be visible."""
    for node in data["graph"]["nodes"]:
        if node["target"] == "aten::add.Tensor":
            node["target"] = "aten::sub.Tensor"


# ------------------------------------------------------------------------------ round trip
@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_round_trip_loads_without_compiling(tmp_path, mode):
    net, fn = make(tmp_path, mode)
    check(net, fn(X))
    assert fn.last_source == "compiled"
    check(net, fn(X))
    assert fn.last_source == "memory"
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    net2, fn2 = make(tmp_path, mode, net)
    check(net, fn2(X))
    assert fn2.last_source == "cache" and not fn2.rejections
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames  # no Dynamo run
    check(net, fn2(X))
    assert fn2.last_source == "memory"


def test_layout_permissions_and_new_signature(tmp_path):
    net, fn = make(tmp_path)
    fn(X)
    fn(torch.randn(5, 8))  # a second input signature: a second entry
    d = fn.directory()
    assert "world1global_rank0" in d and d.endswith(os.path.join("world1global_rank0", "forward"))
    assert os.path.basename(os.path.dirname(os.path.dirname(d))).startswith(
        "Net_static_aclgraphcache_")
    files = sorted(f for f in os.listdir(d) if not f.startswith("."))
    assert len(files) == 3 and "index.json" in files
    for f in files:
        assert os.stat(os.path.join(d, f)).st_mode & 0o777 == 0o600
    assert os.stat(d).st_mode & 0o777 == 0o700


def test_warm_start_in_a_new_process(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_cache import Net, X, make, check
        import pathlib
        net, fn = make(pathlib.Path({str(tmp_path)!r}))
        t0 = time.perf_counter(); out = fn(X); dt = time.perf_counter() - t0
        check(net, out)
        print(fn.last_source, torch._dynamo.utils.counters["stats"]["unique_graphs"], dt)
    """)
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=240, env=env) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    (cold_src, cold_graphs, _), (warm_src, warm_graphs, _) = \
        [r.stdout.split()[-3:] for r in runs]
    assert (cold_src, cold_graphs) == ("compiled", "1")
    assert (warm_src, warm_graphs) == ("cache", "0")


def test_version_change_is_a_different_key(tmp_path, monkeypatch):
    net, fn = make(tmp_path)
    fn(X)
    monkeypatch.setattr(torchair_dist._version, "__version__", "99.0")
    net2, fn2 = make(tmp_path, net=net)
    check(net, fn2(X))
    assert fn2.last_source == "compiled" and fn2.directory() != fn.directory()


# ------------------------------------------------------------------------------- refusals
def test_corrupt_entry(saved, tmp_path, warnings_log):
    d, entry, index = saved
    raw = open(entry, "rb").read()
    cache_mod.write_atomic(entry, raw[: len(raw) // 2])
    reload_and_expect_rejection(tmp_path, warnings_log, "does not match the index")
    net, fn = make(tmp_path)  # the recompile rewrote a good entry
    check(net, fn(X))
    assert fn.last_source == "cache"


def test_corrupt_index(saved, tmp_path, warnings_log):
    d, entry, index = saved
    cache_mod.write_atomic(index, b"{not json")
    reload_and_expect_rejection(tmp_path, warnings_log, "not valid JSON")


def test_corrupt_entry_with_matching_hash_is_rejected_not_run(saved, tmp_path, warnings_log):
    d, entry, index = saved

    def break_graph(data):
        data["graph"]["nodes"][-1]["args"] = {"t": [{"n": "no_such_node"}]}
    rewrite_entry(entry, index, break_graph, fix_hash=True)
    reload_and_expect_rejection(tmp_path, warnings_log, "unknown node")


def test_foreign_owned_entry(saved, tmp_path, warnings_log):
    d, entry, index = saved
    os.chown(entry, OTHER_UID, -1)
    reload_and_expect_rejection(tmp_path, warnings_log, f"owned by uid {OTHER_UID}")
    assert os.stat(entry).st_uid == os.geteuid()  # replaced by our own recompiled entry


def test_foreign_owned_directory_is_neither_read_nor_written(saved, tmp_path, warnings_log):
    d, entry, index = saved
    os.chown(d, OTHER_UID, -1)
    fn = reload_and_expect_rejection(tmp_path, warnings_log, f"owned by uid {OTHER_UID}")
    assert "not saved" in warnings_log.text
    assert fn.rejections


def test_uid_check_by_monkeypatch(saved, tmp_path, warnings_log, monkeypatch):
    monkeypatch.setattr(cache_mod.os, "geteuid", lambda: os.getuid() + 1)
    net, fn = make(tmp_path)
    check(net, fn(X))
    assert fn.last_source == "compiled" and "not by the current user" in str(fn.rejections[0])


@pytest.mark.parametrize("mode_bits", [0o644, 0o640, 0o400])
def test_permissions_must_be_0600(saved, tmp_path, warnings_log, mode_bits):
    d, entry, index = saved
    os.chmod(entry, mode_bits)
    reload_and_expect_rejection(tmp_path, warnings_log, f"mode {mode_bits:o}")


def test_group_writable_directory(saved, tmp_path, warnings_log):
    d, entry, index = saved
    os.chmod(d, 0o770)
    reload_and_expect_rejection(tmp_path, warnings_log, "writable by group/others")


def test_symlinked_entry(saved, tmp_path, warnings_log):
    d, entry, index = saved
    target = str(tmp_path / "elsewhere.json")
    os.rename(entry, target)
    os.symlink(target, entry)
    reload_and_expect_rejection(tmp_path, warnings_log, "symlinks are refused")


def test_tampered_entry(saved, tmp_path, warnings_log):
    d, entry, index = saved
    rewrite_entry(entry, index, poison, fix_hash=False)
    reload_and_expect_rejection(tmp_path, warnings_log, "corrupt or tampered")


def test_stale_version(saved, tmp_path, warnings_log):
    d, entry, index = saved

    def old(data):
        poison(data)
        data["versions"]["torch"] = "2.0.0"
    rewrite_entry(entry, index, old, fix_hash=True)
    reload_and_expect_rejection(tmp_path, warnings_log, "stale entry")


@pytest.mark.parametrize("name", ["os::system", "builtins.eval", "aten::__class__.default",
                                  "aten::no_such_op.default", "posix.system"])
def test_only_torch_ops_can_be_named(name):
    with pytest.raises(CacheRejectedError):
        cache_mod.lookup_op(name)


@pytest.mark.parametrize("node", [
    {"op": "call_method", "name": "m", "target": "__reduce__", "args": {"t": []},
     "kwargs": {"d": {}}},
    {"op": "call_module", "name": "m", "target": "x", "args": {"t": []}, "kwargs": {"d": {}}},
    {"op": "call_function", "name": "m", "target": "builtins.exec",
     "args": {"t": ["print(1)"]}, "kwargs": {"d": {}}},
    {"op": "call_function", "name": "m", "target": "aten::add.Tensor",
     "args": {"t": [{"py": "os.system"}]}, "kwargs": {"d": {}}},
    {"op": "call_function", "name": "m", "target": "aten::zeros.default",
     "args": {"t": [[1]]}, "kwargs": {"d": {"dtype": {"dtype": "__class__"}}}},
])
def test_graph_data_cannot_name_other_code(node):
    with pytest.raises(CacheRejectedError):
        cache_mod.graph_from_data({"nodes": [node], "consts": {}})


def test_graph_data_round_trip_keeps_constants_and_scalars():
    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    gm.register_buffer("_tensor_constant0", torch.arange(4, dtype=torch.bfloat16))
    g = gm.graph
    x = g.placeholder("x")
    c = g.get_attr("_tensor_constant0")
    y = g.call_function(torch.ops.aten.add.Tensor, (x, c), {"alpha": 0.1})
    z = g.call_function(torch.ops.aten.full.default, ([2], float("inf")),
                        {"dtype": torch.float32, "device": torch.device("cpu")})
    g.output((y, z))
    gm.recompile()
    back = cache_mod.graph_from_data(json.loads(json.dumps(cache_mod.graph_to_data(gm))))
    xin = torch.ones(4, dtype=torch.bfloat16)
    for a, b in zip(gm(xin), back(xin)):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------- concurrency
def _writer(root, worker, rounds):
    fn = cache_mod.CacheCompiledFunction(torch.nn.Linear(1, 1), "forward",
                                         torchair_dist.CompilerConfig(), {}, root, "world4r0")
    fn._key = "k" * 32
    for i in range(rounds):
        for sig in ("%032x" % 0, "%032x" % (1 + worker)):  # one shared, one private signature
            fn.write_entry(sig, {"versions": fn.versions(), "signature": sig, "model_key": fn._key,
                                 "payload": [worker, i] * 200})


def test_concurrent_writers_do_not_corrupt(tmp_path):
    root = str(tmp_path / "c")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(root, w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    fn = cache_mod.CacheCompiledFunction(torch.nn.Linear(1, 1), "forward",
                                         torchair_dist.CompilerConfig(), {}, root, "world4r0")
    fn._key = "k" * 32
    for sig in ["%032x" % i for i in range(5)]:
        data = fn.read_entry(sig)  # raises on a torn or mismatched file
        assert data["signature"] == sig and data["payload"][1] == 14
    assert not [f for f in os.listdir(fn.directory()) if f.startswith(".tmp-")]


# ------------------------------------------------------------------------------- API
def test_api_errors(tmp_path):
    with pytest.raises(ConfigError, match="method of a torch.nn.Module"):
        torchair_dist.cache_compile(lambda x: x)
    net = Net()
    with pytest.raises(ConfigError, match="dynamic"):  # dynamic=True is accepted (TorchAir's)
        torchair_dist.cache_compile(net.forward, dynamic=1)
    cfg, other = torchair_dist.CompilerConfig(), torchair_dist.CompilerConfig()
    other.mode = "npugraph_ex"
    with pytest.raises(ConfigError, match="same config"):
        torchair_dist.cache_compile(net, config=cfg,
                                    backend=torchair_dist.get_npu_backend(compiler_config=other))


def test_stored_names_never_reach_generated_code():
    """Node and constant names in the data only link nodes; FX names the rebuilt nodes."""
    evil = "__import__('os').system('touch /tmp/pwned')"
    data = {"consts": {evil: cache_mod._tensor_data(torch.ones(2))}, "nodes": [
        {"op": "placeholder", "name": evil + "p", "target": "x", "args": {"t": []},
         "kwargs": {"d": {}}},
        {"op": "get_attr", "name": evil + "c", "target": evil, "args": {"t": []},
         "kwargs": {"d": {}}},
        {"op": "call_function", "name": evil, "target": "aten::add.Tensor",
         "args": {"t": [{"n": evil + "p"}, {"n": evil + "c"}]}, "kwargs": {"d": {}}},
        {"op": "output", "name": "out", "target": "output", "args": {"t": [{"t": [{"n": evil}]}]},
         "kwargs": {"d": {}}},
    ]}
    gm = cache_mod.graph_from_data(data)
    assert "import" not in gm.code and "system" not in gm.code
    assert torch.equal(gm(torch.ones(2))[0], torch.full((2,), 2.0))


W_GLOBAL = torch.randn(8, 8, generator=torch.Generator().manual_seed(2))
_HOLDER = types.SimpleNamespace()
setattr(_HOLDER, "w-global", W_GLOBAL)  # an attribute no path of the cache can name


class UsesGlobal(nn.Module):
    """Reads a global tensor through an attribute that is not an identifier: outside the
    paths a cache entry stores (cache/sources.py), so the function is not cacheable."""

    def forward(self, x):
        return torch.mm(x, getattr(_HOLDER, "w-global"))


def test_not_cacheable_still_runs_compiled(tmp_path, warnings_log):
    net = UsesGlobal()
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = "npugraph_ex"
    fn = torchair_dist.cache_compile(net, config=cfg, cache_dir=str(tmp_path / "c"))
    assert torch.equal(fn(X), X @ W_GLOBAL) and fn.last_source == "compiled"
    assert "not cacheable" in warnings_log.text and "neither a parameter" in warnings_log.text
    assert "attribute path" in warnings_log.text
    assert not os.path.exists(os.path.join(fn.directory(), "index.json"))
    assert torch.equal(fn(X), X @ W_GLOBAL) and fn.last_source == "memory"


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["inputs"].__setitem__(0, ["state", "forward", False]), "input map"),
    (lambda d: d["inputs"].__setitem__(0, ["arg", 99]), "input map"),
    (lambda d: d["outputs"]["leaves"].__setitem__(0, ["out", 42]), "output map"),
    (lambda d: d.__setitem__("static", [1000]), "static input"),
])
def test_input_output_maps_are_range_checked(saved, tmp_path, warnings_log, edit, match):
    d, entry, index = saved
    rewrite_entry(entry, index, edit, fix_hash=True)
    reload_and_expect_rejection(tmp_path, warnings_log, match)


class WithConstant(nn.Module):
    """A tensor made inside forward becomes a constant of the AOT graph (``get_attr``), as in
    transformers' decode step; the cache must store its value (AOT compiles under fake mode)."""

    def forward(self, x):
        return x * torch.tensor(3.0) + torch.tensor([1.0, 2.0] * 4)


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_round_trip_with_a_tensor_constant(tmp_path, mode):
    cfg = torchair_dist.CompilerConfig()
    cfg.mode = mode
    net = WithConstant()
    fn = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path / "c"))
    assert torch.equal(fn(X), net(X)) and fn.last_source == "compiled" and not fn.rejections
    fn2 = torchair_dist.cache_compile(net.forward, config=cfg, cache_dir=str(tmp_path / "c"))
    assert torch.equal(fn2(X), net(X))
    assert fn2.last_source == "cache" and not fn2.rejections
