"""Every option of every config group and every preset composes into a valid typed Config."""

from __future__ import annotations

import math

import pytest
from hydra.errors import ConfigCompositionException

from qknorm.config import Config
from qknorm.errors import UserError, did_you_mean, first_line
from tests.helpers.config import CONF, compose_config

GROUPS = ["model", "norm", "data", "optimizer", "train", "experiment", "search", "arm"]
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF / g).glob("*.yaml"))]


def test_defaults_are_design_defaults():
    cfg = compose_config()
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.block_size) == (4, 4, 128, 64)
    assert (cfg.norm.kind, cfg.norm.p, cfg.norm.gamma_init) == ("lp", 2.0, "qknorm")
    assert (cfg.data.n_folds, cfg.data.fold) == (10, 9)
    assert (cfg.seed, cfg.device, cfg.dtype, cfg.compile, cfg.threads) == (0, "auto", "float32", "auto", None)
    assert cfg.model.attention == "auto"


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group, option):
    needs = {"data=text": ["data.path=any.txt"]}  # the one option with a key of the user's
    cfg = compose_config(f"{group}={option}", *needs.get(f"{group}={option}", []))
    assert isinstance(cfg, Config)


def test_groups_have_the_design_options():
    names = {g: {o for gg, o in OPTIONS if gg == g} for g in GROUPS}
    assert names["model"] == {"tiny", "cpu", "paper", "cpu_w64", "cpu_w256"}
    assert names["norm"] == {"none", "l2", "lp", "rms"}
    assert {"smoke"} <= names["experiment"]
    assert names["data"] == {"shakespeare_char", "kjv_char", "text"}


@pytest.mark.parametrize("override,key,value", [
    ("norm.p=inf", "p", math.inf),
    ("norm.p=3.5", "p", 3.5),
    ("norm.gamma_init=calibrated", "gamma_init", "calibrated"),
    ("norm.gamma_init=4.0", "gamma_init", 4.0),
    ("norm.gamma_shape=head", "gamma_shape", "head"),
    ("norm.p_learnable=true", "p_learnable", True),
])
def test_norm_overrides(override, key, value):
    assert getattr(compose_config(override).norm, key) == value


# Each arm of the logit-control comparison (issue 46) as its file's comment states it:
# (norm.kind, norm.p, norm.gamma_init, model.attn_softcap, train.z_loss); p and gamma_init are
# the schema's where the kind does not read them.
ARMS = {
    "none": ("none", 2.0, "qknorm", None, 0.0),
    "qknorm": ("l2", 2.0, "qknorm", None, 0.0),
    "lp4_calibrated": ("lp", 4.0, "calibrated", None, 0.0),
    "rms": ("rms", 2.0, "qknorm", None, 0.0),
    "softcap": ("none", 2.0, "qknorm", 50.0, 0.0),  # Gemma 2's attention softcap
    "z_loss": ("none", 2.0, "qknorm", None, 1e-4),  # PaLM's coefficient
    "qk_clip": ("none", 2.0, "qknorm", None, 0.0),  # and model.qk_clip=100, Kimi K2's tau
}


@pytest.mark.parametrize("arm", ARMS)
def test_each_arm_sets_its_norm_and_logit_control(arm):
    cfg = compose_config(f"arm={arm}")
    assert (cfg.norm.kind, cfg.norm.p, cfg.norm.gamma_init, cfg.model.attn_softcap,
            cfg.train.z_loss) == ARMS[arm]
    assert cfg.model.qk_clip == (100.0 if arm == "qk_clip" else None)
    assert cfg.model.n_embd == 128 and cfg.optimizer.lr == 1e-3  # nothing else moves


def test_arms_are_exactly_the_listed_ones_and_the_command_line_wins():
    assert {o for g, o in OPTIONS if g == "arm"} == set(ARMS)
    assert compose_config("arm=softcap", "model.attn_softcap=30").model.attn_softcap == 30.0
    assert compose_config("arm=softcap", "norm=l2").norm.kind == "l2"  # softcap on top of QKNorm


@pytest.mark.parametrize("model, n_head, n_embd", [("cpu_w64", 2, 64), ("cpu", 4, 128),
                                                   ("cpu_w256", 8, 256)])
def test_the_width_ladder_keeps_model_cpu_depth_block_and_head_dim(model, n_head, n_embd):
    m = compose_config(f"model={model}").model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout) == (4, n_head, n_embd, 64, 0.0)
    assert m.n_embd // m.n_head == 32


def test_model_paper_is_nanogpt_gpu_recipe():
    m = compose_config("model=paper").model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout) == (6, 6, 384, 256, 0.2)


def test_unknown_key_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="n_layers"):
        compose_config("model.n_layers=2")


def test_wrong_type_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="norm.p"):
        compose_config("norm.p=abc")


@pytest.mark.parametrize("override,message", [
    ("norm.p=0.5", "norm.p=0.5 is below 1"),
    ("norm.p=nan", "norm.p=nan"),
    ("norm.kind=foo", "norm.kind='foo'"),
    ("model.n_embd=30", "model.n_embd=30 is not divisible by model.n_head=4"),
    ("optimizer.lr=-1", "optimizer.lr=-1.0"),
    ("data.fold=10", "data.fold=10 is out of range"),
    ("norm.gamma_init=hot", "norm.gamma_init='hot'"),
    ("norm=l2 norm.p=4", "norm=l2 fixes p=2"),
    ("compile=yes", "compile='yes' is not one of auto, true, false"),
    ("norm.gamma_param=exp", "norm.gamma_param='exp' is not one of linear, log"),
    ("norm.gamma_param=log norm.gamma_init=-1", "norm.gamma_init=-1 must be one of qknorm, sqrt_d, "
     "calibrated or a positive number (norm.gamma_param=log: gamma = gamma_init"),
    ("train.diag_batches=-1", "train.diag_batches=-1 must be >= 0"),
    ("model.attention=flash", "model.attention='flash' is not one of auto, sdpa, explicit; pick"),
    ("model.attn_softcap=0", "model.attn_softcap=0.0 must be a positive number (Gemma 2: 50"),
    ("model.attn_softcap=inf", "model.attn_softcap=inf must be a positive number"),
    ("train.z_loss=-1e-4", "train.z_loss=-0.0001 must be a number >= 0 (PaLM: 1e-4; 0 turns"),
    ("train.z_loss=inf", "train.z_loss=inf must be a number >= 0"),
    ("model.qk_clip=-1", "model.qk_clip=-1.0 must be a positive number (Kimi K2: 100"),
    ("arm=qk_clip norm=l2", "model.qk_clip=100.0 rescales W_q and W_k, which norm=l2 normalizes "
     "away; use norm=none"),
    ("arm=qk_clip model.arch=angpt", "model.qk_clip=100.0 is read by model.arch=gpt only"),
])
def test_guards_name_the_value_and_the_fix(override, message):
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        compose_config(*override.split())


# Every model key that counts something, at 0 and below: n_head=0 was a ZeroDivisionError (the
# divisibility check divided by it first); each is one line naming the key.
@pytest.mark.parametrize("override, message", [
    ("model.n_head=0", "model.n_head=0 must be >= 1"),
    ("model.n_head=-2", "model.n_head=-2 must be >= 1"),
    ("model.n_layer=0", "model.n_layer=0 must be >= 1"),
    ("model.n_embd=0", "model.n_embd=0 must be >= 1"),
    ("model.block_size=0", "model.block_size=0 must be >= 1"),
    ("model.block_size=-1", "model.block_size=-1 must be >= 1"),
])
def test_a_model_count_below_1_is_one_line_not_a_division_by_zero(override, message):
    with pytest.raises(UserError) as e:
        compose_config(override)
    assert str(e.value) == message


def test_first_line_and_did_you_mean():
    assert first_line(RuntimeError("storage down\n  detail")) == "storage down"
    assert first_line(EOFError()) == "EOFError"  # an exception with no message: its type
    assert first_line("  \n") == ""
    assert did_you_mean("model", "n_layers", ["n_layer", "n_head"]) == "did you mean model.n_layer? "
    assert did_you_mean("", "sed", ["seed", "name"]) == "did you mean seed? "
    assert did_you_mean("model", "zzz", ["n_layer"]) == ""


@pytest.mark.parametrize("setting, device, compiled", [
    ("auto", "cuda", True), ("auto", "cpu", False), (True, "cpu", True), (False, "cuda", False)])
def test_compile_auto_compiles_on_cuda_only(setting, device, compiled):
    import torch

    from qknorm.train import resolve_compile
    assert resolve_compile(setting, torch.device(device)) is compiled
    assert compose_config(f"compile={str(setting).lower()}").compile == setting
