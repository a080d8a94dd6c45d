"""transformers' continuous-batching engine (``model.generate_batch``) compiled with our backend:
token batches (mixed prefill and decode flattened, padded to multiples of 8 tokens), a paged KV
cache updated outside the compiled pieces, attention eager between captured pieces
(``npugraphex_config.piecewise``).

Every request's tokens equal eager's, in npugraph_ex and max-autotune, on one rank and on 2
ranks with transformers' TP; a second ``generate_batch`` compiles nothing (the engine deep-copies
its compile configuration: the copy of our backend is the same backend); a capture is redone only
where the new engine's buffers moved (the layers sharing one graph are keys of their own).
"""
import pytest
from cb_engine_cases import tokens_case

MODES = ["npugraph_ex", "max-autotune"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    import hf_decode

    return hf_decode.save_tiny("llama", str(tmp_path_factory.mktemp("tiny_llama_cb")),
                               num_hidden_layers=2)


def _check(r, mode, where):
    assert r["first"] == r["eager"], f"{where} {mode}: first generate_batch differs from eager"
    assert r["second"] == r["eager"], f"{where} {mode}: second generate_batch differs from eager"
    assert r["frames_second"] == 0, f"{where} {mode}: the second call compiled " \
                                    f"{r['frames_second']} graphs"
    # each generate_batch makes a new engine with new I/O buffers: the sampling graph writes
    # the new output buffer, so its capture is redone once per call; nothing else is
    assert all(r.startswith("moved mutated input") for r in r["recapture_reasons"]), \
        f"{where} {mode}: recaptured for {r['recapture_reasons']}"
    if mode == "npugraph_ex":
        assert r["captures"] > 0, f"{where}: nothing was captured"
        # the declared token counts name the token dim of the flattened batch, and every
        # count the engine pads to is declared: none runs eagerly, none is a capture per step
        assert r["declared"], f"{where}: no graph took the declared token counts"
        assert all(d.startswith("dim ") and sizes for d, sizes in r["declared"].values()), \
            r["declared"]
        assert not r["eager_calls"], f"{where}: token counts ran eagerly: {r['eager_calls']}"


@pytest.mark.parametrize("mode", MODES)
def test_engine_tokens_equal_eager_on_one_rank(llama_dir, mode, fresh_dynamo):
    _check(tokens_case(0, 1, llama_dir, mode), mode, "1 rank")


def test_engine_with_tp_tokens_equal_eager_on_two_ranks(ranks2, llama_dir):
    results = ranks2.run(tokens_case, llama_dir, "npugraph_ex", timeout=420)
    for rank, r in enumerate(results):
        _check(r, "npugraph_ex", f"rank {rank} of 2")
    assert results[0]["eager"] == results[1]["eager"], "TP ranks generated different tokens"
