"""anGPT (model.arch=angpt): its constants from their definitions, unit norms at init, the row
bound after every step, folding, every q/k norm inside it, the command line, resume, bad input."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from qknorm import rundir
from qknorm.angpt import AnBlock, AnGPT, bound_rows_, fold_constants, lerp_norm, nu_lerp
from qknorm.arch import build_model
from qknorm.config import ModelConfig, NormConfig
from qknorm.diagnostics import attention_diagnostics
from qknorm.effective import effective_config, flatten
from qknorm.errors import UserError
from qknorm.model import GPT
from qknorm.nn import calibration_factor, qknorm_gamma
from tests.helpers.cli import REPORT, kill_after_evals
from tests.helpers.config import compose_config

TINY = ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, arch="angpt")
WIDE = ModelConfig(n_layer=6, n_head=4, n_embd=256, block_size=128, arch="angpt")  # the spec's check
NORMS = {
    "none": NormConfig(kind="none"),
    "l2": NormConfig(kind="l2"),
    "lp1": NormConfig(kind="lp", p=1.0),
    "lp2": NormConfig(kind="lp", p=2.0),
    "lp4": NormConfig(kind="lp", p=4.0),
    "lp_inf": NormConfig(kind="lp", p=math.inf),
    "lp_learned_p": NormConfig(kind="lp", p=3.0, p_learnable=True, gamma_shape="head"),
    "lp4_calibrated_log": NormConfig(kind="lp", p=4.0, gamma_init="calibrated", gamma_param="log"),
    "rms": NormConfig(kind="rms"),
}


def make(cfg: ModelConfig = TINY, norm: NormConfig = NORMS["l2"], seed: int = 0) -> AnGPT:
    torch.manual_seed(seed)
    return AnGPT(cfg, norm, vocab_size=65)


def unit_rows(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# the constants, recomputed from their definitions: nu = 1 / sqrt(E||map(x)||^2) at unit input,
# with the model's own unit-row weights at init (Monte Carlo over 4096 inputs)


def test_nu_constants_match_their_definitions():
    model = make(WIDE).double()
    attn, mlp = model.transformer.h[0].attn, model.transformer.h[0].mlp
    d, nh, F_ = WIDE.n_embd, WIDE.n_head, mlp.hidden
    g = torch.Generator().manual_seed(0)
    x = unit_rows(4096, d, g)
    with torch.no_grad():
        # nu_qkv: each head of W_q x (hs of d rows) unit
        q = attn.c_attn(x)[:, :d].view(-1, nh, d // nh)
        assert attn.nu_qkv == pytest.approx(q.square().sum(-1).mean().rsqrt().item(), rel=0.03)
        assert attn.nu_qkv == math.sqrt(nh)
        # nu_p: the output projection sees nh unit heads
        y = torch.cat([unit_rows(4096, d // nh, g) for _ in range(nh)], dim=1)
        assert attn.nu_p == pytest.approx(attn.c_proj(y).square().sum(-1).mean().rsqrt().item(), rel=0.03)
        # nu_uz: F rows over d inputs; nu_d: d rows over F inputs
        u, z = mlp.c_fc(x).split(F_, dim=1)
        assert mlp.nu_uz == pytest.approx(u.square().sum(-1).mean().rsqrt().item(), rel=0.03)
        assert mlp.nu_d == pytest.approx(mlp.c_proj(unit_rows(4096, F_, g)).square().sum(-1)
                                         .mean().rsqrt().item(), rel=0.03)
        assert (mlp.nu_uz, mlp.nu_d) == (0.5, 2.0)
        # nu_acf: u * SiLU(sqrt(d) z) for the unit u, z the MLP makes
        m = (mlp.nu_uz * u) * F.silu(mlp.gate_scale * mlp.nu_uz * z)
        nu_acf_mc = m.square().sum(-1).mean().rsqrt().item()
    assert mlp.nu_acf == WIDE.angpt_nu_acf == 3.74
    assert abs(mlp.nu_acf - nu_acf_mc) < 0.05
    # the same constant as a 1-D expectation, zeta ~ N(0, 1/4), by quadrature: 3.72, d-free
    zeta = torch.linspace(-6, 6, 200001, dtype=torch.float64) * 0.5
    density = torch.exp(-2 * zeta.square()) / math.sqrt(2 * math.pi * 0.25)
    second_moment = torch.trapezoid(F.silu(zeta).square() * density, zeta).item()
    assert second_moment ** -0.5 == pytest.approx(3.72, abs=0.005)
    assert nu_acf_mc == pytest.approx(second_moment ** -0.5, rel=0.03)


@pytest.mark.parametrize("alpha", [0.05, 0.2, 0.5, 1.0])
def test_lerp_factor_keeps_unit_norm(alpha):
    g = torch.Generator().manual_seed(1)
    h, x = unit_rows(8192, 256, g), unit_rows(8192, 256, g)
    out = lerp_norm(h, x, torch.full((256,), alpha, dtype=torch.float64))
    assert out.square().sum(-1).mean().item() == pytest.approx(1.0, abs=0.02)
    assert nu_lerp(torch.tensor(alpha)).item() == pytest.approx((alpha**2 + (1 - alpha) ** 2) ** -0.5)
    assert lerp_norm(h, x, torch.full((256,), -alpha, dtype=torch.float64)).equal(out)  # |alpha|


# ---------------------------------------------------------------------------------------------
# norms at init


def _block_output_norms(model, idx) -> list[torch.Tensor]:
    norms: list[torch.Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: norms.append(out.norm(dim=-1)))
             for b in model.transformer.h]
    with torch.no_grad():
        model.eval()(idx, idx)
    for h in hooks:
        h.remove()
    return norms


def test_residual_stream_stays_unit_norm_at_init_while_gpts_grows():
    idx = torch.randint(65, (4, 128), generator=torch.Generator().manual_seed(2))
    an = _block_output_norms(make(WIDE), idx)
    assert len(an) == 6
    for layer, n in enumerate(an):  # every token, every layer
        assert 0.9 <= n.min().item() and n.max().item() <= 1.1, (layer, n.min(), n.max())
    torch.manual_seed(0)
    gpt = GPT(dataclasses.replace(WIDE, arch="gpt"), NORMS["l2"], 65)
    means = [n.mean().item() for n in _block_output_norms(gpt, idx)]
    assert all(b > a for a, b in zip(means, means[1:])), means  # grows layer after layer
    assert means[-1] > 1.5 * means[0]


def test_weights_start_on_the_sphere():
    model = make()
    for w in [*model.bounded_weights(), model.transformer.wte.weight]:
        torch.testing.assert_close(w.norm(dim=1), torch.ones(w.size(0)), rtol=0, atol=1e-6)
    # stored at 1/sqrt(d), used as stored * init * sqrt(d): init, up to float32 rounding
    alpha = model.transformer.h[0].alpha_attn
    assert alpha.stored.eq(torch.tensor(32 ** -0.5)).all()
    torch.testing.assert_close(alpha(), torch.full((32,), 0.05), rtol=1e-6, atol=0)
    torch.testing.assert_close(model.s_z(), torch.ones(65), rtol=1e-6, atol=0)


def test_param_count_is_the_spec_formula():
    model = make(norm=NORMS["l2"])
    V, d, L, F_ = 65, 32, 2, 128
    # untied embedding and head, 4 d^2 attention, 3 F d SwiGLU, two alphas per block, s_z, gamma
    assert model.n_params() == 2 * V * d + L * (4 * d * d + 3 * F_ * d) + 2 * L * d + V + L


# ---------------------------------------------------------------------------------------------
# the bound after every step


def _check_bound(model: AnGPT) -> None:
    for w in model.bounded_weights():
        assert w.float().norm(dim=1).max().item() <= 1 + 1e-6
    emb = model.transformer.wte.weight.float().norm(dim=1)
    torch.testing.assert_close(emb, torch.ones_like(emb), rtol=0, atol=1e-5)


def test_projection_after_a_huge_step_bounds_rows_and_leaves_1d_params():
    model = make(norm=NORMS["lp4"])
    opt = model.configure_optimizer(1e3, 0.0, (0.9, 0.95), "cpu")
    idx = torch.randint(65, (4, 16), generator=torch.Generator().manual_seed(3))
    model(idx, idx)[1].backward()
    opt.step()
    assert max(w.norm(dim=1).max().item() for w in model.bounded_weights()) > 10  # really huge
    one_d = {n: p.detach().clone() for n, p in model.named_parameters() if p.dim() == 1 or p.dim() == 0}
    assert "s_z.stored" in one_d and "transformer.h.0.attn.qk_norm.gamma" in one_d
    model.project_weights_()
    _check_bound(model)
    for name, p in model.named_parameters():
        if name in one_d:
            assert p.equal(one_d[name]), name  # bitwise untouched


def test_bound_divides_by_max_1_norm_short_rows_left_alone():
    w = torch.tensor([[0.3, 0.4], [3.0, 4.0], [0.0, 0.0], [0.6, 0.8]])
    bounded = w.clone()
    bound_rows_(bounded)
    assert bounded.equal(torch.tensor([[0.3, 0.4], [0.6, 0.8], [0.0, 0.0], [0.6, 0.8]]))
    assert bounded[0].equal(w[0]) and bounded[3].equal(w[3])  # norm 0.5 and 1: bitwise untouched
    exact = w.clone()
    bound_rows_(exact, exact=True)  # the init's and the embedding's: every nonzero row onto the sphere
    torch.testing.assert_close(exact, torch.tensor([[0.6, 0.8], [0.6, 0.8], [0.0, 0.0], [0.6, 0.8]]),
                               rtol=0, atol=1e-7)


def test_projection_leaves_rows_inside_the_ball_and_sets_embedding_rows_to_one():
    model = make()
    with torch.no_grad():
        for w in model.bounded_weights():
            w.mul_(0.5)  # every matrix row at norm 0.5
        model.transformer.wte.weight.mul_(0.5)
    inside = [w.detach().clone() for w in model.bounded_weights()]
    model.project_weights_()
    for before, w in zip(inside, model.bounded_weights()):
        assert w.equal(before)  # a bound, not a projection: short rows bitwise untouched
    emb = model.transformer.wte.weight.norm(dim=1)
    torch.testing.assert_close(emb, torch.ones_like(emb), rtol=0, atol=1e-6)  # embeddings exactly 1


def test_bound_of_a_bf16_weight_is_computed_in_float32():
    g = torch.Generator().manual_seed(8)
    w = torch.randn(64, 48, generator=g) * 0.3
    w[::2] *= 3  # even rows longer than 1 (norm about 6)
    w[1::2] /= 10  # odd rows shorter (about 0.2)
    b = w.bfloat16()
    want = b.float() / b.float().norm(dim=1, keepdim=True).clamp_min(1.0)
    bound_rows_(b)
    assert b.dtype == torch.bfloat16
    assert b.equal(want.bfloat16())  # the float32 quotient, rounded once
    assert b[1::2].equal(w[1::2].bfloat16())  # short rows untouched in bf16 as well
    in_bf16 = w.bfloat16() / torch.linalg.vector_norm(w.bfloat16(), dim=1, keepdim=True).clamp_min(1.0)
    assert not in_bf16.equal(b)  # a bf16 norm and quotient would give other numbers


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_train_step_bounds_rows(dtype):
    from qknorm.train import setup, train_step

    run = setup(compose_config("model=tiny", "model.arch=angpt", "optimizer=angpt",
                               "optimizer.lr=1e3", f"dtype={dtype}", "train.batch_size=4"))
    x, y = run.splits.train.sample(4, run.batch_rng)
    loss = train_step(run, x, y)
    assert math.isfinite(loss.item())
    assert all(p.dtype == torch.float32 for p in run.raw_model.parameters())  # autocast, fp32 params
    _check_bound(run.raw_model)


def test_angpt_preset_is_adam_without_decay_or_warmup():
    from qknorm.train import lr_at

    cfg = compose_config("model.arch=angpt", "optimizer=angpt")
    o = cfg.optimizer
    assert (o.weight_decay, o.warmup_iters, o.beta1, o.beta2, o.min_lr) == (0.0, 0, 0.9, 0.95, 0.0)
    assert lr_at(0, o, 100) == o.lr  # the peak at step 0
    opt = build_model(cfg.model, cfg.norm, 65).configure_optimizer(o.lr, o.weight_decay,
                                                                   (o.beta1, o.beta2), "cpu")
    assert all(group["weight_decay"] == 0.0 for group in opt.param_groups)


# ---------------------------------------------------------------------------------------------
# exactness


@pytest.mark.parametrize("name", ["none", "l2", "lp4", "rms"])
def test_gradcheck_scaled_block_float64(name):
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=8, block_size=5, arch="angpt")
    torch.manual_seed(0)
    block = AnBlock(cfg, NORMS[name]).double()
    h = unit_rows(2 * 5, 8, torch.Generator().manual_seed(4)).view(2, 5, 8).requires_grad_(True)
    assert torch.autograd.gradcheck(block, (h,), eps=1e-6, atol=1e-5)
    alpha = torch.full((8,), 0.3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lerp_norm, (h, x, alpha), eps=1e-6, atol=1e-5)


def test_folding_the_constants_into_the_weights_keeps_every_logit():
    model = make(norm=NORMS["lp4"]).eval()
    folded = fold_constants(model)
    attn, mlp = folded.transformer.h[0].attn, folded.transformer.h[0].mlp
    assert (attn.nu_qkv, attn.nu_p, mlp.nu_uz, mlp.gate_scale, mlp.nu_acf, mlp.nu_d) == (1.0,) * 6
    assert model.transformer.h[0].attn.nu_qkv == math.sqrt(2)  # the original is untouched
    idx = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a, _ = model(idx, idx)
        b, _ = folded(idx, idx)
    assert not torch.equal(a, b)  # computed another way...
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)  # ...to the same logits


# ---------------------------------------------------------------------------------------------
# every q/k norm in anGPT


@pytest.mark.parametrize("norm", NORMS.values(), ids=NORMS.keys())
def test_every_norm_runs_forward_backward(norm):
    model = make(norm=norm)
    g = torch.Generator().manual_seed(6)
    idx, targets = torch.randint(65, (2, 4, 16), generator=g)
    _, loss = model(idx, targets)
    assert loss.item() == pytest.approx(math.log(65), abs=0.1)  # unit logits' scale: near uniform
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = make(norm=norm)(idx, targets)
    loss.backward()
    assert math.isfinite(loss.item())


def test_gamma_inits_mean_the_same_in_both_architectures():
    hs, T = 16, 16

    def gamma(arch: str, **norm) -> float:
        cfg = dataclasses.replace(TINY, arch=arch)
        return build_model(cfg, NormConfig(**norm), 65).transformer.h[0].attn.qk_norm.gamma.item()

    for p in (1.0, 2.0, 4.0, math.inf):
        # calibrated: the architecture's own p = 2 temperature, scaled to p
        assert gamma("angpt", p=p, gamma_init="calibrated") == pytest.approx(
            math.sqrt(hs) * calibration_factor(p, hs), rel=1e-6)
        assert gamma("gpt", p=p, gamma_init="calibrated") == pytest.approx(
            qknorm_gamma(T) * calibration_factor(p, hs), rel=1e-6)
        for init, value in (("qknorm", qknorm_gamma(T)), ("sqrt_d", math.sqrt(hs)), (3.0, 3.0)):
            assert gamma("angpt", p=p, gamma_init=init) == gamma("gpt", p=p, gamma_init=init)
            assert gamma("angpt", p=p, gamma_init=init) == pytest.approx(value, rel=1e-7)  # float32
    assert gamma("angpt", gamma_init="calibrated") == math.sqrt(hs)  # p = 2: anGPT's own scale (4)
    assert make(norm=NORMS["none"]).transformer.h[0].attn.qk_norm.scale == math.sqrt(hs)
    qknorm_scale = dataclasses.replace(TINY, angpt_logit_scale="qknorm")
    assert build_model(qknorm_scale, NormConfig(gamma_init="calibrated"), 65).transformer.h[0] \
        .attn.qk_norm.gamma.item() == pytest.approx(qknorm_gamma(T))


def test_p2_temperature_is_the_same_whatever_the_norm_kind():
    """At init, rms, l2 calibrated and none give anGPT's logits sqrt(hs) cos(q, k): the same
    spread (none only about, its q, k are unit by nu_qkv, not exactly)."""
    idx = torch.randint(65, (4, 16), generator=torch.Generator().manual_seed(7))
    batches = [(idx, idx)]
    spread = {name: attention_diagnostics(make(norm=norm), batches, torch.autocast("cpu", enabled=False))
              ["logit_std"] for name, norm in (("rms", NORMS["rms"]), ("none", NORMS["none"]),
                                               ("l2", NormConfig(kind="l2", gamma_init="calibrated")))}
    assert spread["rms"] == pytest.approx(spread["l2"], rel=1e-3)
    assert spread["none"] == pytest.approx(spread["l2"], rel=0.25)


# ---------------------------------------------------------------------------------------------
# the command line, resume, bad input


@pytest.mark.slow
def test_cli_trains_angpt_and_writes_final_json(cli):
    r = cli("-m", "qknorm.train", "model.arch=angpt", "norm.p=4", "experiment=smoke", "threads=1",
            "hydra.run.dir=run")
    assert r.returncode == 0, r.stderr
    final = rundir.read_final(cli.cwd / "run")
    assert final["status"] == "completed" and final["steps"] == 30
    assert final["p"] == 4.0 and final["val_loss"] < math.log(65)
    # tiny: 1 layer, 32 wide, 65 characters
    assert final["n_params"] == 2 * 65 * 32 + (4 * 32 * 32 + 3 * 128 * 32) + 2 * 32 + 65 + 1
    assert "logit_std_l0" in final  # the attention diagnostics read anGPT too


@pytest.mark.slow
def test_a_race_over_p_runs_in_angpt_through_the_sweeper(cli):
    """The sweeper, the race and the report take anGPT's runs as they take GPT's: a p race
    (whole folds, no rungs) over 3 folds on the tiny model."""
    import optuna
    import yaml
    from hydra_racing_sweeper.study import RACE_OUTCOME_ATTR

    r = cli("-m", "qknorm.train", "search=p_race", "experiment=smoke", "model.arch=angpt",
            "optimizer=angpt", "threads=1", "train.max_iters=20", "train.eval_interval=10",
            "norm.p=choice(1,2,inf)", "++hydra.sweeper.replicates={data.fold:[0,1,2]}",
            "hydra.sweeper.race.min_replicates=2", "hydra.sweeper.race.rungs=null",
            "hydra/job_logging=disabled")
    assert r.returncode == 0, r.stderr[-3000:]
    study = optuna.load_study(study_name="smoke_race",
                              storage=f"sqlite:///{cli.cwd}/outputs/optuna.db")
    trials = {t.params["norm.p"]: t for t in study.get_trials()}
    assert sorted(trials) == [1.0, 2.0, math.inf]
    assert all(RACE_OUTCOME_ATTR in t.user_attrs for t in trials.values())  # each decided
    base = trials[2.0].user_attrs["job_dirs"]  # the baseline ran at least the first look's folds
    assert {"data.fold=0", "data.fold=1"} <= set(base)
    for d in base.values():
        cfg = yaml.safe_load((Path(d) / ".hydra" / "config.yaml").read_text())
        assert cfg["model"]["arch"] == "angpt" and cfg["optimizer"]["weight_decay"] == 0.0
        assert rundir.read_final(Path(d))["status"] == "completed"
    report = cli(REPORT, "outputs/sweeps/smoke_race")
    assert report.returncode == 0, report.stderr[-2000:]
    assert "## Race: study smoke_race" in (cli.cwd / "outputs/sweeps/smoke_race/summary.md").read_text()


@pytest.mark.slow
def test_killed_angpt_run_resumes_bitwise(cli):
    run = ["model.arch=angpt", "optimizer=angpt", "norm.p=4", "experiment=smoke", "threads=1",
           "train.max_iters=120", "train.eval_interval=20", "train.save_checkpoint=true"]
    assert cli("-m", "qknorm.train", *run, "hydra.run.dir=ref").returncode == 0
    kill_after_evals(cli.cwd, run, "killed", n_evals=3)
    assert rundir.read_final(cli.cwd / "killed") is None
    ckpt_step = rundir.load_checkpoint(cli.cwd / "killed")["step"]
    assert 20 <= ckpt_step < 120
    r = cli("-m", "qknorm.train", *run, "hydra.run.dir=killed", "train.resume=true")
    assert r.returncode == 0, r.stderr
    assert f"at step {ckpt_step}" in (cli.cwd / "killed" / "train.log").read_text()
    want, got = rundir.read_metrics(cli.cwd / "ref"), rundir.read_metrics(cli.cwd / "killed")
    assert [row["step"] for row in got] == list(range(0, 121, 20))
    for key in ("val_loss", "train_loss", "lr", "gamma_mean"):
        assert [row[key] for row in got] == [row[key] for row in want], key  # bitwise
    ref, final = rundir.read_final(cli.cwd / "ref"), rundir.read_final(cli.cwd / "killed")
    for key in ("val_loss", "best_val_loss", "train_loss", "gamma", "p"):
        assert final[key] == ref[key], key


@pytest.mark.parametrize("overrides,message", [
    ("model.arch=bert", "model.arch='bert' is not one of gpt, angpt; pick one of those"),
    ("model.angpt_alpha_init=0.01",
     "model.angpt_alpha_init=0.01 is read by model.arch=angpt only; add model.arch=angpt or drop it"),
    ("model.angpt_logit_scale=qknorm", "model.angpt_logit_scale='qknorm' is read by model.arch=angpt"),
    ("model.arch=angpt model.bias=true", "model.bias=true is read by model.arch=gpt only"),
    ("model.arch=angpt model.angpt_logit_scale=calibrated",
     "model.angpt_logit_scale='calibrated' is not one of qknorm, sqrt_d; pick one of those"),
    ("model.arch=angpt model.angpt_logit_scale=-1", "model.angpt_logit_scale=-1 must be one of"),
    ("model.arch=angpt model.angpt_alpha_init=0", "model.angpt_alpha_init=0.0 must be in (0, 1]"),
    ("model.arch=angpt model.n_embd=24 model.n_head=8", "model.arch=angpt rotates q, k in pairs"),
])
def test_bad_input_is_one_clear_error(overrides, message):
    with pytest.raises(UserError) as e:
        compose_config(*overrides.split())
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.slow
def test_bad_arch_on_the_command_line_is_one_line(cli):
    r = cli("-m", "qknorm.train", "experiment=smoke", "model.angpt_nu_acf=3.72")
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line == ("error: model.angpt_nu_acf=3.72 is read by model.arch=angpt only; "
                    "add model.arch=angpt or drop it")


def test_effective_config_drops_the_other_architectures_keys():
    gpt = flatten(dataclasses.asdict(compose_config()))
    assert not any(k.startswith(("model.arch", "model.angpt_")) for k in effective_config(gpt))
    angpt = flatten(dataclasses.asdict(compose_config("model.arch=angpt")))
    kept = effective_config(angpt)
    assert kept["model.arch"] == "angpt" and kept["model.angpt_alpha_init"] == 0.05
    assert "model.bias" not in kept
