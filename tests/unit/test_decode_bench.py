"""benchmarks/decode_bench.py: every variant that runs on CPU in one process, interleaved
rounds, tokens compared with eager's, the table and its failure rules."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import decode_bench  # noqa: E402


@pytest.fixture
def record_capture(monkeypatch):
    monkeypatch.setenv("TORCHAIR_DIST_CPU_CAPTURE", "record")


def test_eager_and_ours_interleave_in_one_process_and_decode_eagers_tokens(record_capture):
    res = decode_bench.run_model("tiny", torch.device("cpu"),
                                 ["eager", "ours npugraph_ex"], rounds=2, tokens=4,
                                 log=lambda msg: None)
    names = [v.name for v in res["variants"]]
    assert names == ["eager", "ours npugraph_ex"]
    for v in res["variants"]:
        assert v.error is None and len(v.round_ms) == 2 and v.first_round_s > 0
        assert v.mismatches == 0
    assert res["limit_ms"] > 0 and res["weight_bytes"] == sum(
        p.numel() * p.element_size() for p in decode_bench.make_model(
            "tiny", torch.device("cpu")).parameters())
    table = "\n".join(decode_bench.format_result(res))
    assert "ours npugraph_ex" in table and "== eager" in table and "weight-read limit" in table
    assert decode_bench.failures(res, strict=True) == []


def test_cuda_only_variants_are_named_not_run_on_cpu(record_capture):
    res = decode_bench.run_model("tiny", torch.device("cpu"),
                                 ["eager", "torch cudagraphs backend",
                                  "inductor reduce-overhead"], rounds=1, tokens=2,
                                 log=lambda msg: None)
    assert [v.name for v in res["variants"]] == ["eager"]
    assert res["skipped"] == {"torch cudagraphs backend": "CUDA only",
                              "inductor reduce-overhead": "CUDA only"}
    assert "(CUDA only)" in "\n".join(decode_bench.format_result(res))


def test_a_variant_that_errors_or_differs_fails(record_capture, monkeypatch):
    real = decode_bench.make_variant

    def broken(name, step):
        if name == "inductor":
            def fail(*args):
                raise RuntimeError("boom")
            return fail
        return real(name, step)

    monkeypatch.setattr(decode_bench, "make_variant", broken)
    res = decode_bench.run_model("tiny", torch.device("cpu"), ["eager", "inductor"],
                                 rounds=1, tokens=2, log=lambda msg: None)
    bad = decode_bench.failures(res, strict=False)
    assert bad == ["inductor: RuntimeError: boom"]
    eager = res["variants"][0]
    eager.mismatches = 1
    assert "eager: tokens differ from eager's" in decode_bench.failures(res, strict=True)
