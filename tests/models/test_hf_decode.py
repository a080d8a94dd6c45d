"""Static-KV-cache greedy decode of a Hugging Face Llama sharded by transformers' own TP
(``from_pretrained(dir, tp_plan="auto")``, 2 gloo ranks), in every mode, driven both ways:

* ``model.generate(cache_implementation="static", compile_config=CompileConfig(backend=...,
  fullgraph=True))``;
* an explicit loop over a ``StaticCache`` with ``torch.compile(model.forward, fullgraph=True)``.

Every rank's tokens must equal eager's, with one Dynamo frame, one graph and no recompile for
the decode step (the prefill runs eagerly). The ACL modes run the CPU capture stand-in, so the
capture count is the runner's: one capture per cache buffer set and batch, replayed every step.
"""
import pytest
from hf_decode_cases import MODES, capture_case, decode_case

ATOL = 1e-4  # compiled vs eager logits of the explicit loop (0.0 / ~1e-7 observed)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    import hf_decode

    return hf_decode.save_tiny("llama", str(tmp_path_factory.mktemp("tiny_llama")),
                               num_hidden_layers=1)


def _check_decode(results, mode, driver):
    for rank, r in enumerate(results):
        assert r["ours"] == r["eager"], f"rank {rank} {mode} {driver}: tokens differ from eager"
        assert r["frames"] == 1 and r["graphs"] == 1 and r["recompiles"] == 0, (rank, r)
        if r["diff"] is not None:
            assert r["diff"] <= ATOL, f"rank {rank}: logits differ by {r['diff']}"
        if mode == "max-autotune":
            assert r["captures"] is None, "GE has no ACL-graph runner"
        else:
            assert r["captures"] == 1, f"rank {rank}: {r['captures']} captures for one decode"
    assert results[0]["eager"] == results[1]["eager"], "TP ranks must generate the same tokens"


@pytest.mark.parametrize("driver", ["generate", "loop"])
@pytest.mark.parametrize("mode", MODES)
def test_static_cache_decode_two_ranks(ranks2, llama_dir, mode, driver):
    results = ranks2.run(decode_case, llama_dir, mode, driver, timeout=240)
    _check_decode(results, mode, driver)


def test_decode_captures_once_per_cache_and_batch(ranks2, llama_dir):
    """npugraph_ex: a reused cache (same buffers) replays the one capture for every step; a
    new cache (new buffers) or another batch size captures once more. ``generate`` with
    ``cache_implementation="static"`` allocates a new StaticCache per call, so each call
    captures once; passing one ``StaticCache`` to ``generate`` captures once for all calls.
    """
    results = ranks2.run(capture_case, llama_dir, "npugraph_ex", timeout=240)
    for rank, r in enumerate(results):
        assert all(r["same"]), f"rank {rank}: tokens differ from eager: {r['same']}"
        c = r["counts"]
        assert c["first_loop"] == 1, (rank, c)
        assert c["same_cache_reused"] == 1, (rank, c)
        assert c["new_cache_same_shape"] == 2, (rank, c)
        assert c["other_batch"] == 3, (rank, c)
        assert c["generate_twice"] == 2, (rank, c)  # new cache buffers per generate call
        assert c["generate_twice_one_cache"] == 3, (rank, c)  # one capture for that cache
        # Dynamo: batch 3 is a second frame; generate's decode stays one frame
        assert r["loop_frames"] == 2 and r["gen_frames"] == 1, (rank, r)


@pytest.fixture(scope="module")
def mistral_dir(tmp_path_factory):
    import hf_decode

    return hf_decode.save_tiny("mistral", str(tmp_path_factory.mktemp("tiny_mistral")),
                               num_hidden_layers=1)


@pytest.mark.parametrize("mode", MODES)
def test_sliding_window_decode_captures_once_per_graph(ranks2, mistral_dir, mode):
    """Mistral's sliding-window ``StaticCache`` passes the decode position to the mask as a
    Python int (``cumulative_length_int``): Dynamo compiles a second frame with that int
    symbolic (as with torch's own ``eager`` backend), and the ACL runner feeds it as a value,
    so each graph is captured once and replayed on the later steps, not captured per step."""
    results = ranks2.run(decode_case, mistral_dir, mode, "loop", 2, 6, 9, timeout=240)
    for rank, r in enumerate(results):
        assert r["ours"] == r["eager"], f"rank {rank}: tokens differ from eager"
        assert r["diff"] <= ATOL, f"rank {rank}: logits differ by {r['diff']}"
        assert r["frames"] == 2 and r["graphs"] == 2, (rank, r)
        if mode == "max-autotune":
            assert r["captures"] is None, "GE has no ACL-graph runner"
        else:
            assert r["captures"] == 2, f"rank {rank}: {r['captures']} captures for 8 steps"
