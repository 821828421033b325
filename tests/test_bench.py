"""scripts/bench.py through its command line on the tiny model: the JSON's schema, not its speed."""

from __future__ import annotations

import json
import math

import pytest
import torch

from qknorm.bench import steps as bench
from qknorm.norms import lp_normalize
from tests.helpers import REPO

SPREAD_KEYS = {"median", "q1", "q3", "iqr", "n"}


def _check_spread(s: dict, n: int) -> None:
    assert set(s) == SPREAD_KEYS
    assert s["n"] == n
    assert s["q1"] <= s["median"] <= s["q3"]
    assert s["iqr"] == pytest.approx(s["q3"] - s["q1"])


@pytest.mark.timeout(1200)  # its benchmark run is given 900 s (pyproject.toml's default: 600)
@pytest.mark.slow
def test_bench_cli_writes_json_with_every_section(cli):
    out = cli.cwd / "b.json"
    r = cli(str(REPO / "scripts" / "bench.py"), "--model", "tiny", "--threads", "1",
            "--norms", "none,lp_p4,lp_p2_general", "--dtypes", "float32",
            "--warmup", "1", "--rounds", "3", "--steps", "1", "--micro-reps", "1",
            "--micro-ps", "2,inf",
            "--overhead-repeats", "1", "--out", str(out), "train.batch_size=4", timeout=900)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["command"].startswith("python scripts/bench.py --model tiny")
    assert d["environment"]["threads"] == 1
    assert d["config"] == {"model": "tiny", "overrides": ["train.batch_size=4"], "n_layer": 1,
                           "n_head": 2, "n_embd": 32, "block_size": 32, "batch_size": 4,
                           "device": d["config"]["device"]}
    assert (d["rounds"], d["steps_per_round"], d["warmup_steps"]) == (3, 1, 1)

    names = [v["name"] for v in d["variants"]]
    assert names == ["none-fp32-eager", "lp_p4-fp32-eager", "lp_p2_general-fp32-eager"]
    for v in d["variants"]:
        _check_spread(v["step_ms"], 3)
        _check_spread(v["cpu_step_ms"], 3)
        assert v["attention"] == "auto"
        _check_spread(v["tokens_per_s"], 3)
        # tokens/s and ms/step describe the same rounds (4 x 32 tokens per step); with 3 rounds
        # the median is one round's value
        assert v["tokens_per_s"]["median"] == pytest.approx(4 * 32 / (v["step_ms"]["median"] / 1e3))
        assert v["general_lp_path"] == (v["norm"] == "lp_p2_general")

    ratios = d["ratios"]
    # the pairs whose both sides were measured, no others
    assert set(ratios) == {"lp_p4-fp32-eager / lp_p2_general-fp32-eager"}
    _check_spread(ratios["lp_p4-fp32-eager / lp_p2_general-fp32-eager"], 3)
    assert set(d["ratios_cpu"]) == set(ratios)
    assert d["reference"] == "none-fp32-eager"
    assert set(d["speedup"]) == set(d["speedup_cpu"]) == {"lp_p4-fp32-eager",
                                                          "lp_p2_general-fp32-eager"}

    micro = d["norm_micro"]
    assert micro["shape"] == [4, 2, 32, 16]
    assert [(row["p"], row["path"]) for row in micro["rows"]] == [
        (2.0, "fast"), ("inf", "fast"), (2.0, "general"), ("inf", "general")]
    p2 = next(r for r in micro["rows"] if r["p"] == 2.0 and r["path"] == "fast")
    assert p2["ratio_vs_p2_fast"]["median"] == 1.0

    e = d["eval"]  # the tiny model's defaults: 20 eval batches, diagnostics on 4 of them
    assert (e["norm"], e["eval_iters"], e["diag_batches"]) == ("none", 20, 4)
    for key in ("eval_ms", "diagnostics_ms", "diagnostics / eval"):
        _check_spread(e[key], 3)
        assert e[key]["median"] > 0

    o = d["overhead"]
    phases = ("import", "compose", "data", "model")
    for phase in (*phases, *(f"warm_{p}" for p in phases[1:]), "in_process", "process", "job",
                  "warm_job"):
        for kind in ("wall", "cpu"):
            _check_spread(o[f"{phase}_{kind}_s"], 1)
            assert o[f"{phase}_{kind}_s"]["median"] >= 0
    for kind in ("wall", "cpu"):  # with one repeat each median is that repeat's value
        assert o[f"in_process_{kind}_s"]["median"] == pytest.approx(
            sum(o[f"{p}_{kind}_s"]["median"] for p in phases))
        assert o[f"warm_job_{kind}_s"]["median"] == pytest.approx(
            sum(o[f"warm_{p}_{kind}_s"]["median"] for p in phases[1:]))


@pytest.mark.slow
def test_bench_cli_rejects_unknown_variant(cli):
    r = cli(str(REPO / "scripts" / "bench.py"), "--model", "tiny", "--norms", "l3",
            "--out", str(cli.cwd / "b.json"))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: unknown norm variant 'l3'; pick from " + ", ".join(bench.NORMS)]
    assert not (cli.cwd / "b.json").exists()


def test_ratios_are_taken_round_by_round():
    vs = bench.variants(["none", "l2", "lp_p4"], ["float32", "bfloat16"], [False])
    times = {v.name: [1.0, 2.0, 4.0] for v in vs}
    times["l2-fp32-eager"] = [1.0, 4.0, 2.0]  # slow in round 2, fast in round 3
    times["lp_p4-bf16-eager"] = [0.5, 1.0, 2.0]
    r = bench._ratios(vs, times)
    assert set(r) == {
        "l2-fp32-eager / none-fp32-eager", "l2-bf16-eager / none-bf16-eager",
        "lp_p4-fp32-eager / l2-fp32-eager", "lp_p4-bf16-eager / l2-bf16-eager",
        "none-bf16-eager / none-fp32-eager", "l2-bf16-eager / l2-fp32-eager",
        "lp_p4-bf16-eager / lp_p4-fp32-eager"}
    # per round 1/1, 4/2, 2/4 -> median 1.0 (a ratio of medians would say 2/2 = 1.0 by luck only)
    assert r["l2-fp32-eager / none-fp32-eager"]["median"] == 1.0
    assert r["lp_p4-fp32-eager / l2-fp32-eager"] == {"median": 1.0, "q1": 0.75, "q3": 1.5,
                                                      "iqr": 0.75, "n": 3}
    assert r["lp_p4-bf16-eager / lp_p4-fp32-eager"]["median"] == 0.5


def test_attention_variants_are_named_and_compared_with_auto():
    vs = bench.variants(["lp_p4"], ["float32"], [True], ["auto", "sdpa"])
    assert [v.name for v in vs] == ["lp_p4-fp32-compiled", "lp_p4-fp32-compiled-sdpa"]
    r = bench._ratios(vs, {v.name: [1.0, 2.0, 3.0] for v in vs})
    assert set(r) == {"lp_p4-fp32-compiled-sdpa / lp_p4-fp32-compiled"}
    with pytest.raises(bench.UserError, match="^unknown attention 'flash'; pick from auto, sdpa, "
                       "explicit$"):
        bench.variants(["lp_p4"], ["float32"], [False], ["flash"])


def test_arch_variants_are_named_and_compared_with_gpt_in_the_same_round():
    vs = bench.variants(["l2", "lp_p4"], ["float32"], [False], ["auto"], ["gpt", "angpt"])
    assert [v.name for v in vs] == ["l2-fp32-eager", "angpt-l2-fp32-eager", "lp_p4-fp32-eager",
                                    "angpt-lp_p4-fp32-eager"]  # gpt, angpt back to back
    times = {v.name: [1.0, 1.0, 1.0] for v in vs}
    times["angpt-lp_p4-fp32-eager"] = [1.5, 1.0, 3.0]
    r = bench._ratios(vs, times)
    assert set(r) == {"angpt-l2-fp32-eager / l2-fp32-eager", "angpt-lp_p4-fp32-eager / lp_p4-fp32-eager",
                      "lp_p4-fp32-eager / l2-fp32-eager",
                      "angpt-lp_p4-fp32-eager / angpt-l2-fp32-eager"}
    assert r["angpt-lp_p4-fp32-eager / lp_p4-fp32-eager"]["median"] == 1.5
    with pytest.raises(bench.UserError, match="^unknown arch 'bert'; pick from gpt, angpt$"):
        bench.variants(["l2"], ["float32"], [False], ["auto"], ["bert"])


def test_bench_steps_times_angpt_as_training_builds_it(monkeypatch):
    from qknorm.angpt import AnGPT
    from qknorm.model import GPT

    built = []

    def recording(variant, *args):
        run = build_run(variant, *args)
        built.append((variant.arch, type(run.raw_model), run.cfg.model.arch))
        return run

    build_run = bench.build_run
    monkeypatch.setattr(bench, "build_run", recording)
    vs = bench.variants(["lp_p4"], ["float32"], [False], ["auto"], ["gpt", "angpt"])
    d = bench.bench_steps(vs, "tiny", ["train.batch_size=2"], warmup=1, rounds=2, steps=1)
    assert built == [("gpt", GPT, "gpt"), ("angpt", AnGPT, "angpt")]  # the model timed is the arch's
    assert [(v["name"], v["arch"]) for v in d["variants"]] == [("lp_p4-fp32-eager", "gpt"),
                                                               ("angpt-lp_p4-fp32-eager", "angpt")]
    ratio = d["ratios"]["angpt-lp_p4-fp32-eager / lp_p4-fp32-eager"]
    _check_spread(ratio, 2)
    assert ratio["median"] > 0


def test_speedups_are_reference_over_variant_round_by_round():
    times = {"none-fp32-eager": [2.0, 4.0, 3.0], "lp_p4-fp32-compiled": [1.0, 1.0, 3.0]}
    assert bench._speedups(times) == {"lp_p4-fp32-compiled": {
        "median": 2.0, "q1": 1.5, "q3": 3.0, "iqr": 1.5, "n": 3}}
    assert bench._speedups({"l2-fp32-eager": [1.0]}) == {}  # no reference measured: none


def test_spread_quartiles_are_exact():
    s = bench.spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert s == {"median": 3.0, "q1": 2.0, "q3": 4.0, "iqr": 2.0, "n": 5}


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 3.5, 4.0, 8.0, math.inf])
def test_general_path_matches_fast_path(p):
    """The bench's 'general' variants compute the same function as lp_normalize."""
    x = torch.randn(3, 4, 8, 16, generator=torch.Generator().manual_seed(0))
    ref = x.double() / torch.linalg.vector_norm(x.double(), ord=p, dim=-1, keepdim=True)
    torch.testing.assert_close(lp_normalize(x, p).double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bench.lp_normalize_general(x, p).double(), ref, rtol=1e-5, atol=1e-6)


def test_use_general_path_switches_a_model_in_place():
    """The bench's lp_p2_general variants: the same model and parameters, the reference path."""
    from qknorm.config import ModelConfig, NormConfig
    from qknorm.model import GPT

    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16), NormConfig(p=4.0), 65)
    idx = torch.randint(65, (3, 16), generator=torch.Generator().manual_seed(1))
    _, fast = model(idx, idx)
    bench.use_general_path(model)
    assert [type(n) for n in model.lp_norms()] == [bench.GeneralLpQKNorm] * 2
    _, general = model(idx, idx)
    torch.testing.assert_close(general, fast, rtol=1e-5, atol=1e-6)


def _profile_step_module():
    from qknorm.research import profile_step

    return profile_step


def test_profile_categories_claim_ops_by_scope_then_by_name():
    """qknorm.research.profile_step: an op under the optimizer or the norm's backward belongs to
    them whatever its name; an op outside every scope goes by its own name."""
    from collections import Counter
    from types import SimpleNamespace as Event

    ps = _profile_step_module()
    step = Event(name="Optimizer.step#AdamW.step", cpu_parent=None)
    norm_bwd = Event(name="_LpNormalizeBackward", cpu_parent=None)
    assert ps.category(Event(name="aten::mul_", cpu_parent=step)) == "optimizer"
    assert ps.category(Event(name="aten::mm", cpu_parent=Event(name="x", cpu_parent=norm_bwd))) \
        == "norm backward"
    assert ps.category(Event(name="aten::mm", cpu_parent=None)) == "matmul (linear layers)"
    assert ps.category(Event(name="aten::bmm", cpu_parent=None)) == "attention"
    assert ps.category(Event(name="aten::zeros", cpu_parent=None)) == "other"
    text = ps.markdown("cmd", {"cpu_capability": "AVX2", "threads": 1, "torch_version": "t",
                               "load_avg_1m": 0.5, "cpu_count": 2},
                       {"v": (4.0, Counter({"optimizer": 1.0, "other": 3.0}),
                              Counter({"aten::mm": 4.0}))}, top=1)
    assert "| optimizer | 25.0% |" in text and "| other | 75.0% |" in text
    assert "| `aten::mm` | 100.0% |" in text
