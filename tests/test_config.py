"""Every option of every config group and every preset composes into a valid typed Config."""

from __future__ import annotations

import math

import pytest
from hydra.errors import ConfigCompositionException

from qknorm.config import Config
from qknorm.errors import UserError, did_you_mean, first_line
from tests.helpers.config import CONF, compose_config

GROUPS = ["model", "norm", "data", "optimizer", "train", "experiment", "search"]
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
    assert names["model"] == {"tiny", "cpu", "paper"}
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
])
def test_guards_name_the_value_and_the_fix(override, message):
    with pytest.raises(UserError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        compose_config(*override.split())


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
