"""A fixed slice of PyTorch's OpInfo sweep (benchmarks/opinfo_sweep.py) in CI: every entry
compiled in max-autotune and npugraph_ex must equal eager (the sweep's per-dtype tolerance);
the slice covers direct converters, ops lowered through PyTorch's decompositions, 0-d/zero-size
samples, the prims twins, npugraph_ex's side-effect ops, and one refusal with its reason."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import opinfo_sweep  # noqa: E402

OK_BOTH_MODES = [
    # direct converters
    "add", "mul", "div.no_rounding_mode", "abs", "exp", "softmax", "matmul", "mm", "bmm",
    "cumsum", "topk", "sum", "mean", "amax", "argmax", "where", "clamp", "masked_fill",
    "nn.functional.layer_norm", "nn.functional.embedding", "cat", "stack", "transpose",
    "nn.functional.gelu", "nn.functional.silu",
    # 0-d / zero-size first samples (were ZeroDivisionError)
    "index_copy", "index_select", "unfold", "logsumexp",
    # Core ATen converters added for the sweep
    "acos", "asin", "atan", "atan2", "cosh", "tan", "erfc", "erfinv", "log2", "exp2",
    "remainder", "fmod", "bitwise_xor", "logical_xor", "bitwise_left_shift", "isnan",
    "signbit", "copysign", "nextafter", "prod", "cumprod", "cummax", "scatter_add",
    "scatter_reduce.amax", "hypot", "fmax",
    # through PyTorch's decompositions
    "addmv", "addcmul", "addcdiv", "baddbmm", "dot", "mv", "addr", "block_diag", "var", "std",
    "nn.functional.group_norm", "nn.functional.batch_norm", "diagonal", "trace", "nan_to_num",
    "xlogy", "round.decimals_3", "nn.functional.max_pool2d",
    # FFTs, composed special functions, searches/scatters, data-dependent lengths
    "fft.rfft2", "fft.ifft", "fft.irfft", "lgamma", "digamma", "polygamma.polygamma_n_2",
    "special.erfcx", "searchsorted", "index_reduce.mean", "scatter_reduce.mean",
    "diagonal_scatter", "nonzero", "masked_select", "unique",
    # segment reductions
    "_segment_reduce.lengths", "_segment_reduce.offsets", "nn.functional.embedding_bag",
    # resampling (converters/aten_resample.py)
    "nn.functional.adaptive_avg_pool3d", "_upsample_bilinear2d_aa",
]
NPUGRAPH_EX_ONLY = ["linalg.inv", "linalg.solve", "linalg.cholesky"]  # with_effects ops


@pytest.fixture(scope="module", autouse=True)
def _validate():
    old = os.environ.get("TORCHAIR_DIST_GE_VALIDATE")
    os.environ["TORCHAIR_DIST_GE_VALIDATE"] = "1"
    yield
    if old is None:
        os.environ.pop("TORCHAIR_DIST_GE_VALIDATE")
    else:
        os.environ["TORCHAIR_DIST_GE_VALIDATE"] = old


def _entries(names):
    found = {opinfo_sweep.entry_name(op): op for op in opinfo_sweep.select(names, None)}
    missing = [n for n in names if n not in found]
    assert not missing, f"not in this torch's op_db: {missing}"
    return [found[n] for n in names]


def _refused_here(name: str, mode: str) -> str:
    """The refusal expected on this torch (None: the entry must equal eager): torch 2.11 has no
    decomposition of max_pool2d_with_indices (2.13 has), and GE has no converter for it."""
    from torch._decomp import decomposition_table

    if name == "nn.functional.max_pool2d" and mode == "max-autotune" and \
            torch.ops.aten.max_pool2d_with_indices.default not in decomposition_table:
        return "aten.max_pool2d_with_indices.default: no converter yet"
    return None


def test_slice_equals_eager_in_every_mode():
    bad = []
    for op in _entries(OK_BOTH_MODES):
        row = opinfo_sweep.run_entry(op, torch.float32, opinfo_sweep.MODES, timeout=120)
        assert row["eager"] == "ok", row
        for mode in opinfo_sweep.MODES:
            refused = _refused_here(row["name"], mode)
            if refused is not None:
                if row[mode][0] != "refused" or refused not in str(row[mode]):
                    bad.append(f"{row['name']} {mode}: {row[mode]} (expected: {refused})")
            elif row[mode][0] not in ("ok", "ok-decomposed"):
                bad.append(f"{row['name']} {mode}: {row[mode]}")
    assert not bad, "\n".join(bad)


def test_slice_bfloat16_max_autotune():
    names = ["add", "mul", "softmax", "acos", "atan2", "var", "addmv", "cumprod", "erfinv",
             "nn.functional.layer_norm", "isnan", "hypot"]
    bad = []
    for op in _entries(names):
        row = opinfo_sweep.run_entry(op, torch.bfloat16, ["max-autotune"], timeout=120)
        if row["max-autotune"][0] not in ("ok", "ok-decomposed"):
            bad.append(f"{row['name']}: {row['max-autotune']}")
    assert not bad, "\n".join(bad)


def test_side_effect_ops_in_npugraph_ex():
    for op in _entries(NPUGRAPH_EX_ONLY):
        row = opinfo_sweep.run_entry(op, torch.float32, ["npugraph_ex"], timeout=120)
        assert row["npugraph_ex"] == ("ok", ""), row


def test_a_refusal_names_the_op_and_its_reason():
    (op,) = _entries(["special.bessel_j0"])
    row = opinfo_sweep.run_entry(op, torch.float32, ["max-autotune"], timeout=120)
    assert row["max-autotune"][0] == "refused"
    assert "bessel_j0" in row["max-autotune"][1] and "special function" in row["max-autotune"][1]


def test_compare_catches_a_wrong_result():
    assert opinfo_sweep.compare(torch.ones(3), torch.ones(3)) is None
    assert "output 0" in opinfo_sweep.compare(torch.ones(3), torch.ones(3) + 1e-2)
    assert opinfo_sweep.compare(torch.ones(3, dtype=torch.bfloat16),
                                torch.ones(3, dtype=torch.bfloat16) * 1.01) is None
    assert "dtype" in opinfo_sweep.compare(torch.ones(3), torch.ones(3, dtype=torch.float64))
    assert opinfo_sweep.compare(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_slice_integer_and_bool_max_autotune(dtype):
    # bool operands are carried as integers where a GE op's IR takes no DT_BOOL; integer
    # cumsum/cumprod keep their dtype (both were wrong or invalid before)
    names = ["add", "transpose", "where", "masked.cumsum", "masked.cumprod", "amax", "maximum",
             "scatter_reduce.amax", "nn.functional.pad.constant", "unbind"]
    bad = []
    for op in _entries(names):
        row = opinfo_sweep.run_entry(op, dtype, ["max-autotune"], timeout=120)
        if row["max-autotune"][0] not in ("ok", "ok-decomposed"):
            bad.append(f"{row['name']} ({row['dtype']}): {row['max-autotune']}")
    assert not bad, "\n".join(bad)


def test_several_dtypes_render_one_page_block(tmp_path):
    page = tmp_path / "opinfo.md"
    page.write_text("# x\n\n" + opinfo_sweep.START.format(dtype="dtypes") + "\nold\n"
                      + opinfo_sweep.END.format(dtype="dtypes") + "\n\ntail\n")
    code = opinfo_sweep.main(["--dtypes", "int32", "bool", "--ops", "add", "--check",
                              "--mode", "max-autotune", "--write-page", str(page), "--json", str(tmp_path / "r.json")])
    text = page.read_text()
    assert code == 0
    assert "old" not in text and text.endswith("tail\n")
    # the block says when it ran, on which torch and with which command (not where it wrote)
    assert f"torch {torch.__version__}: `python benchmarks/opinfo_sweep.py --dtypes int32 bool --ops add " \
        "--check --mode max-autotune`." in text and "r.json" not in text
    assert "| int32 | `max-autotune` | 1 | 1 |" in text and "| bool | `max-autotune` | 1 | 1 |" in text
