"""The cost of the 2nd and later calls of transformers' ``generate`` / ``generate_batch`` with a
compile backend in its ``CompileConfig`` (transformers deep-copies the configuration, backend
included, on every call: a backend that is not equal to its copy compiles the model again).

  python benchmarks/hf_second_call.py {generate,batch} {npugraph_ex,max-autotune,inductor}
      [--cc-mode reduce-overhead|none] [--calls 3]

A tiny random Llama (``launch/tiny_config.py``, no download), greedy, 6 new tokens for 2
prompts; ``generate`` passes ``GenerationConfig(compile_config=...)``, ``batch`` a
``ContinuousBatchingConfig`` with the varlen and decode compile configs. Prints each call's
seconds and the Dynamo frames it compiled, then the torchair_dist warnings seen.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch"))

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import tiny_config  # noqa: E402
import torchair_dist  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("path", choices=["generate", "batch"])
    p.add_argument("mode", choices=["npugraph_ex", "max-autotune", "inductor"])
    p.add_argument("--cc-mode", default="reduce-overhead",
                   help="CompileConfig's mode (transformers' default: reduce-overhead; none)")
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args()
    from transformers import (AutoModelForCausalLM, CompileConfig, ContinuousBatchingConfig,
                              GenerationConfig)

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(tiny_config.tiny_config("llama"),
                                                 dtype=torch.float32).eval()
    if args.mode == "inductor":
        backend = "inductor"
    else:
        config = torchair_dist.CompilerConfig()
        config.mode = args.mode
        backend = torchair_dist.get_npu_backend(compiler_config=config)
    cc = CompileConfig(backend=backend, fullgraph=False,
                       mode=None if args.cc_mode == "none" else args.cc_mode)
    cc._compile_all_devices = True  # transformers compiles on CPU only when told to
    ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    gen = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=0,
                           cache_implementation="static", compile_config=cc)

    def call():
        if args.path == "generate":
            return model.generate(ids, generation_config=gen)
        cb = ContinuousBatchingConfig(varlen_compile_config=cc, decode_compile_config=cc,
                                      num_blocks=8, page_size=16, max_batch_tokens=64,
                                      max_requests_per_batch=4)
        return model.generate_batch(ids.tolist(), generation_config=GenerationConfig(
            max_new_tokens=6, do_sample=False, pad_token_id=0), continuous_batching_config=cb)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(args.calls):
            frames, start = counters["frames"]["ok"], time.perf_counter()
            call()
            print(f"call {i}: {time.perf_counter() - start:6.2f} s, "
                  f"{counters['frames']['ok'] - frames} frame(s) compiled", flush=True)
    seen = sorted({str(w.message) for w in caught if "torchair_dist" in str(w.message)
                   or "reduce-overhead" in str(w.message)})
    print("torchair_dist warnings:", seen or "none")


if __name__ == "__main__":
    main()
