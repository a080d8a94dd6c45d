"""The serving loop of ``launch/serve.py`` on 2 ranks (tiny Llama, transformers' TP): continuous
batching of a request stream, prefill and decode steps compiled in every mode, prompts padded to
declared prefill sizes, decode steps padded to declared batch sizes.

Every request's tokens must equal eager's on every rank, the eager loop must equal each
request generated alone (with prompts at their own length and padded to the prefill sizes), and
a capturing mode captures each declared decode size and each declared prefill size at most once
(no recapture over the warm-up and two passes over the stream, no graph compiled while serving),
and copies no output (the loop drops each step's outputs before the next).
"""
import pytest
from serving_cases import PREFILL_SIZES, SIZES, eager_case, mode_case

MODES = ["npugraph_ex", "reduce-overhead", "max-autotune"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    import hf_decode

    return hf_decode.save_tiny("llama", str(tmp_path_factory.mktemp("tiny_llama_serve")),
                               num_hidden_layers=1)


def test_eager_loop_equals_each_request_alone(ranks2, llama_dir):
    results = ranks2.run(eager_case, llama_dir, timeout=240)
    for rank, r in enumerate(results):
        assert r["loop"] == r["alone"], f"rank {rank}: batched loop differs from generate()"
        assert r["padded"] == r["alone"], f"rank {rank}: padded prefills change the tokens"
        assert r["padded_steps"] > 0, "the stream must exercise padding rows"
        assert set(r["steps_per_size"]) == set(SIZES), r["steps_per_size"]
        assert r["padded_prefills"] > 0, "the stream must exercise padded prompts"
        assert set(r["prefills_per_size"]) == set(PREFILL_SIZES), r["prefills_per_size"]
    assert results[0]["loop"] == results[1]["loop"], "TP ranks must generate the same tokens"


@pytest.mark.parametrize("mode", MODES)
def test_serving_loop_tokens_equal_eager(ranks2, llama_dir, mode):
    results = ranks2.run(mode_case, llama_dir, mode, timeout=300)
    for rank, r in enumerate(results):
        for i, tokens in enumerate(r["ours"]):
            bad = [rid for rid in r["eager"] if tokens[rid] != r["eager"][rid]]
            assert not bad, f"rank {rank} {mode} pass {i}: requests {bad} differ from eager"
        for i, compiled in enumerate(r["compiled_while_serving"]):
            assert compiled == {"prefill": 0, "decode": 0}, (rank, mode, i, compiled)
        if mode == "max-autotune":
            assert r["report"] == {} and r["prefill_report"] == {}, "GE has no ACL-graph runner"
            # prompts at their own length: one dynamic graph, nothing compiled while serving
            assert len(r["prefills_per_size"]) > len(PREFILL_SIZES), r["prefills_per_size"]
            continue
        for what in ("report", "prefill_report"):
            entries = [e for keys in r[what].values() for k, e in keys.items()]
            assert entries, f"rank {rank}: no {what} graph captured"
            assert all("uncaptured_runs" not in e for e in entries), r[what]
            assert all(e["captures"] <= 1 and e["recaptures"] == 0 for e in entries), r[what]
        assert r["per_size"] == {s: 1 for s in SIZES}, (rank, r["per_size"], r["report"])
        # every prompt length 3..8 served by the two declared prefill sizes, each captured once
        assert r["prefill_per_size"] == {s: 1 for s in PREFILL_SIZES}, (rank, r["prefill_report"])
        assert set(r["prefills_per_size"]) == set(PREFILL_SIZES), r["prefills_per_size"]
        assert r["copies"] == 0, f"rank {rank}: the loop drops its outputs, no copy is due"
    assert results[0]["eager"] == results[1]["eager"]


def test_captures_per_size_reads_the_dynamic_size_of_each_key():
    """The size of a graph key is the dynamic dimension's value passed as an input (outside the
    shapes), whatever the first shape starts with: a prefill piece's key starts with the
    tokens' shape (1, t). Keys in capture_report's format, as the loop's graphs give them."""
    import serving

    prefill_piece = {f"graph_3.piece_{p}": {f"[(1, {t}), (), (), (1, {t}), {t}, {t}]":
                                            {"captures": 1} for t in (8, 16)} for p in (0, 2)}
    assert serving.captures_per_size(prefill_piece) == {
        "piece_0:8": 1, "piece_0:16": 1, "piece_2:8": 1, "piece_2:16": 1}
    decode = {"graph_0": {f"[{b}, ({b}, 1), {b}, ({b}, 1), None]": {"captures": 1}
                          for b in (2, 4)},
              "graph_1": {"[(1, 1), (1, 1)]": {"captures": 2}, "*": {"uncaptured_runs": 1}}}
    assert serving.captures_per_size(decode) == {2: 1, 4: 1, 1: 2}


def test_loop_check_fails_on_a_prefill_size_captured_twice():
    """launch/serve.py exits 1 when a declared prefill size was captured twice, naming it, as
    for a decode size, and when a request's tokens differ from eager's."""
    import serve

    def row(**over):
        r = dict(variant="npugraph_ex", status="ok", same_as_eager=True, mismatched_requests=[],
                 captures_per_size={1: 1, 2: 1}, recaptures=0,
                 prefill_captures_per_size={8: 1, 16: 1}, prefill_recaptures=0)
        r.update(over)
        return r

    def everything(*rows):
        return [dict(eager={0: [1, 2]}, rows=list(rows))] * 2

    assert serve._check(everything(row())) == []
    failures = serve._check(everything(row(prefill_captures_per_size={8: 2, 16: 1})))
    assert len(failures) == 2 and all("prefill" in f and "{8: 2}" in f for f in failures)
    failures = serve._check(everything(row(captures_per_size={1: 1, 2: 3})))
    assert failures and all("decode" in f and "{2: 3}" in f for f in failures)
    failures = serve._check(everything(row(same_as_eager=False, mismatched_requests=[4])))
    assert failures and all("[4] differ" in f for f in failures)
