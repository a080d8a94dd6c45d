"""``torchair_dist.cache_compile`` on the 2-rank TP Llama (DTensor parameters, HF ModelOutput):
a first set of rank processes compiles and saves; a *new* set of processes loads the entries
without running Dynamo and matches eager."""
import pytest
from model_cases import llama_cache_case, llama_cache_flat_call_case

from harness import RankPool


@pytest.mark.parametrize("mode", ["npugraph_ex"])
def test_llama_cache_warm_start_in_new_processes(tmp_path, mode):
    cache_dir = str(tmp_path / "cache")
    results = []
    for _phase in ("cold", "warm"):
        pool = RankPool(2)  # fresh processes for each phase
        try:
            results.append(pool.run(llama_cache_case, mode, cache_dir, timeout=240))
        finally:
            pool.shutdown()
    cold, warm = results
    for rank in range(2):
        assert cold[rank]["source"] == "compiled" and cold[rank]["dynamo_graphs"] == 1
        assert warm[rank]["source"] == "cache", warm[rank]
        assert warm[rank]["dynamo_graphs"] == 0, "the warm start ran Dynamo"
        assert warm[rank]["type"] == "CausalLMOutputWithPast"
        assert warm[rank]["diff"] <= 1e-5 and cold[rank]["diff"] <= 1e-5
        assert f"world2global_rank{rank}" in warm[rank]["dir"]
    print("cold first call s:", [r["first_s"] for r in cold],
          "warm first call s:", [r["first_s"] for r in warm])


@pytest.mark.parametrize("mode", ["npugraph_ex", "max-autotune"])
def test_llama_flat_call_runs_the_generated_entry_call_on_every_rank(ranks2, tmp_path, mode):
    """HF Llama with PyTorch TP (DTensor shards read through their parameter getters) behind a
    positional forward: the warm calls take the generated call and match eager on each rank."""
    results = ranks2.run(llama_cache_flat_call_case, mode, str(tmp_path / "cache"), timeout=240)
    for rank, r in enumerate(results):
        assert r["sources"] == ["cache", "memory", "memory"], (rank, r)
        assert r["generated_call"] and r["fast_keyed"] == 1, (rank, r)
        assert r["diff"] <= 1e-5, (rank, r)
