"""CompilerConfig: every option validated, unknown names rejected, per-mode warnings."""
import os

import pytest

from torchair_dist import CompilerConfig
from torchair_dist.configs.option import (BoolOption, CallableOption, ChoiceOption, OpNameListOption,
                                          DictOption, IntListOption, IntRangeOption, PathOption,
                                          PoolHandleOption, RegexOption, StrOption)
from torchair_dist.errors import ConfigError, TorchairDistError

SEED_FIELDS = ["debug", "aoe_config", "export", "dump_config", "fusion_config",
               "experimental_config", "inference_config", "ge_config", "aclgraph_config",
               "npugraphex_config", "mode", "post_grad_custom_pre_pass",
               "post_grad_custom_post_pass"]

ALL_LEAVES = [path for path, _ in CompilerConfig().leaves()]


def test_has_every_field_of_the_seed():
    cfg = CompilerConfig()
    for name in SEED_FIELDS:
        assert hasattr(cfg, name), name
    assert cfg.mode.raw == "max-autotune" and cfg.mode.value == "max-autotune"


def _valid_value(opt):
    """A valid non-default value for an option, or None when it has none."""
    if isinstance(opt, ChoiceOption):
        others = [c for c in opt.choices if c != opt.raw or type(c) is not type(opt.raw)]
        return others[0] if others else None
    if isinstance(opt, IntRangeOption):
        return opt.lo if opt.raw != opt.lo else opt.lo + 1
    if isinstance(opt, IntListOption):
        return [1, 2]
    if isinstance(opt, OpNameListOption):
        return ["aten.mm", "npu.npu_fused_infer_attention_score.default"]
    if isinstance(opt, DictOption):
        return {"k": 1}
    if isinstance(opt, CallableOption):
        return lambda g: None
    if isinstance(opt, PathOption):
        if opt.must_exist == "dir":
            return os.path.dirname(__file__)
        if opt.must_exist == "file":
            return None  # covered in test_path_options
        return "/tmp/somewhere"
    if isinstance(opt, RegexOption):
        return opt.example
    if isinstance(opt, StrOption):
        return "name"
    if isinstance(opt, PoolHandleOption):
        return (0, 1)
    raise AssertionError(f"no sample for {type(opt)}")


def _invalid_value(opt):
    if isinstance(opt, (ChoiceOption, IntRangeOption)):
        return "not-a-choice" if not isinstance(opt, BoolOption) else 1
    if isinstance(opt, RegexOption):
        return "!!bad!!"
    if isinstance(opt, PathOption):
        return 123
    if isinstance(opt, (StrOption, IntListOption, DictOption, CallableOption)):
        return 3.5 if not isinstance(opt, IntListOption) else ["a"]
    if isinstance(opt, PoolHandleOption):
        return "pool"
    if isinstance(opt, OpNameListOption):
        return ["mm"]  # not namespace.op
    raise AssertionError(f"no invalid sample for {type(opt)}")


@pytest.mark.parametrize("path", ALL_LEAVES)
def test_every_option_accepts_valid_and_rejects_invalid(path):
    cfg = CompilerConfig()
    opt = cfg.option(path)
    assert opt.doc, f"{path} has no doc"
    good = _valid_value(opt)
    if good is not None:
        cfg.option(path).set(good)
        assert cfg.get(path) is not None
        assert cfg.changed(), path
    bad = _invalid_value(opt)
    if bad is None:
        return
    with pytest.raises(TorchairDistError) as info:
        cfg.option(path).set(bad)
    assert path in str(info.value)


def test_assignment_goes_through_validation():
    cfg = CompilerConfig()
    cfg.debug.graph_dump.type = "py"
    assert cfg.debug.graph_dump.type.raw == "py"
    with pytest.raises(ValueError, match="debug.graph_dump.type"):
        cfg.debug.graph_dump.type = "png"
    with pytest.raises(ValueError, match=r"static_capture_size_limit.*\[1, "):
        cfg.debug.aclgraph.static_capture_size_limit = 0
    with pytest.raises(TypeError, match="export.export_name"):
        cfg.export.export_name = 5
    with pytest.raises(ValueError, match="run_eagerly"):
        cfg.debug.run_eagerly = 1  # bools are strict: 1 is not True


def test_unknown_attribute_lists_valid_names():
    cfg = CompilerConfig()
    with pytest.raises(ConfigError, match=r"has no option 'nope', all options \[.*'debug'"):
        cfg.nope = 1
    with pytest.raises(ConfigError, match=r"_DebugConfig|DebugConfig has no option 'rn_eagerly'"):
        cfg.debug.rn_eagerly = True
    with pytest.raises(ConfigError, match="cannot be replaced"):
        cfg.debug = None


def test_path_options(tmp_path):
    cfg = CompilerConfig()
    with pytest.raises(FileNotFoundError, match="aoe_config.work_path"):
        cfg.aoe_config.work_path = str(tmp_path / "missing")
    js = tmp_path / "dump.json"
    js.write_text("{}")
    cfg.dump_config.dump_config_path = str(js)
    assert cfg.dump_config.dump_config_path.raw == str(js)
    with pytest.raises(ValueError, match="json"):
        cfg.dump_config.dump_config_path = str(tmp_path / "dump.txt")
    f = tmp_path / "fusion.cfg"
    f.write_text("")
    cfg.fusion_config.fusion_switch_file = str(f)


def test_value_string_form_matches_torchair():
    cfg = CompilerConfig()
    assert cfg.debug.run_eagerly.value == "0"
    cfg.debug.run_eagerly = True
    assert cfg.debug.run_eagerly.value == "1"
    assert cfg.debug.aclgraph.static_capture_size_limit.value == "64"
    assert cfg.export.export_name.value is None


def test_equality_by_value_and_no_shared_state():
    a, b = CompilerConfig(), CompilerConfig()
    assert a == b
    a.debug.run_eagerly = True
    assert a != b and b.debug.run_eagerly.raw is False
    c = a.copy()
    assert c == a
    c.experimental_config.frozen_parameter = True
    assert a.experimental_config.frozen_parameter.raw is False
    assert a.debug.run_eagerly is not c.debug.run_eagerly


def test_mode_values():
    cfg = CompilerConfig()
    for mode in ("max-autotune", "reduce-overhead", "npugraph_ex"):
        cfg.mode = mode
    with pytest.raises(ValueError, match="mode"):
        cfg.mode = "default"
