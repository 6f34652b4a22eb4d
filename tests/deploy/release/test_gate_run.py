"""The gate on the built-in model: a candidate adapter from a short real training run is measured
against the live (base) release on the same prompts; metrics, each axis's paired interval and the
decision with its reasons are stored; a floor the candidate cannot meet rejects it with the reason
on the release row; HH switched off skips that axis and says so. A candidate identical to live
passes every axis (its intervals are [0, 0]); a candidate trained on a set that ignores the
verbosity slider is rejected on steerability while the other axes pass."""

from __future__ import annotations

import json
import re

import pytest
from service_helpers import judge_model_dir, tiny_settings
from training_helpers import make_run_dir
from typer.testing import CliRunner

from deploy.release.evaluate import gate_candidate
from deploy.release.gate import AXES
from deploy.release.measure import weights_dtype
from deploy.release.registry import ensure_base_release
from deploy.wiring import build_cli
from store import Store
from trainer.config import config_for
from trainer.process import start_run
from trainer.rundir import EXIT_OK

pytestmark = pytest.mark.slow

# Small enough for a 2-core CPU; the defaults are a few times larger.
GATE = {"gate.helpfulness_prompts": 4, "gate.harmlessness_prompts": 6, "gate.max_new_tokens": 24, "gate.hh_limit": 2,
        "gate.steer_prompts": 3, "gate.steer_values": [0, 2, 4], "gate.bootstrap": 500}


@pytest.fixture(scope="module")
def trained(builtin_model_dir, tmp_path_factory):
    """A real (short) SFT run on the built-in model: its adapter is the candidate."""
    root = tmp_path_factory.mktemp("gate")
    run_dir = make_run_dir(root / "run", "sft", n=8)
    handle = start_run(run_dir, config_for("sft", base_model=str(builtin_model_dir), max_steps=2, batch_size=4))
    assert handle.wait(600) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    return root, run_dir


def _succeeded_run(store: Store, run_dir, base_model) -> str:
    run = store.jobs.create_training_run(method="sft", run_dir=str(run_dir), base_model=str(base_model))
    store.jobs.update_training_run(run.id, status="succeeded")
    return run.id


def test_gate_measures_both_sides_and_stores_metrics_and_reasons(trained, builtin_model_dir, tmp_path, monkeypatch):
    import weakref

    # Imported first: bitsandbytes' first import logs a caught exception, and pytest's log capture
    # keeps it, with the frames of whatever loaded a model at the time.
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401

    import deploy.release.evaluate

    root, run_dir = trained
    real, loaded = deploy.release.evaluate.load_merged, []

    def tracked(base_model, adapter, dtype):  # each side loaded in turn, the first freed before the second
        assert all(ref() is None for ref, _ in loaded), "the candidate's model is still in memory"
        model, tokenizer = real(base_model, adapter, dtype)
        loaded.append((weakref.ref(model), adapter))
        return model, tokenizer

    monkeypatch.setattr(deploy.release.evaluate, "load_merged", tracked)
    settings = tiny_settings(root / "data", builtin_model_dir, **GATE)  # HH: the sample shipped in the package
    messages: list[str] = []
    with Store(settings.db_path) as store:
        base = ensure_base_release(store, str(builtin_model_dir))
        run_id = _succeeded_run(store, run_dir, builtin_model_dir)
        outcome = gate_candidate(store, settings, run_id, progress=messages.append)
        assert [adapter is None for _, adapter in loaded] == [False, True]  # the candidate's, then the bare base

        release = store.releases.get(outcome.release_id)
        assert release.run_id == run_id and release.status == ("candidate" if outcome.decision.promote else "rejected")
        assert outcome.live_release_id == base.id and store.releases.live().id == base.id  # the gate never promotes
        for side in (outcome.candidate, outcome.live):
            assert set(side) == set(AXES) and all(side[a] is not None for a in AXES), side
            assert 0 <= side["helpfulness"] <= 1 and 0 <= side["harmlessness"] <= 1 and 0 <= side["hh_accuracy"] <= 1
        assert store.releases.eval_results(outcome.release_id)["gate"] == pytest.approx(outcome.candidate)
        assert store.releases.eval_results(base.id)["gate"] == pytest.approx(outcome.live)

        stored = release.decision
        assert stored["promote"] == outcome.decision.promote and stored["live_release"] == base.id
        assert [a["axis"] for a in stored["axes"]] == list(AXES)
        assert stored["reasons"] == outcome.decision.reasons and all(stored["reasons"])
        # Both sides scored the same way; every axis has its interval of candidate − live.
        assert outcome.details["candidate"]["hh"]["scorer"] == outcome.details["live"]["hh"]["scorer"] == "loglik_mean"
        assert outcome.details["candidate"]["weights"] == outcome.details["live"]["weights"] == weights_dtype(settings)
        assert set(outcome.intervals) == set(AXES) and stored["intervals"] == outcome.intervals
        for axis in stored["axes"]:
            assert axis["low"] <= axis["diff"] + 1e-9 and axis["diff"] <= axis["high"] + 1e-9 and "95% CI" in axis["reason"]
        # Helpfulness also says what the difference is at equal length (reported, not judged).
        equal = stored["intervals"]["helpfulness"]["at_equal_length"]
        assert equal["low"] <= equal["diff"] <= equal["high"] and len(equal["words"]) == 2
        assert "at equal length Δ" in stored["axes"][0]["reason"]
        json.dumps(outcome.as_dict())
        assert any("risky prompts" in m for m in messages)
        steps = outcome.details["steps"]  # where the gate's time went, kept with its outcome
        assert [st["step"] for st in steps] == messages and messages[-1] == outcome.decision.summary()
        assert [st["at_s"] for st in steps] == sorted(st["at_s"] for st in steps)

        again = gate_candidate(store, settings, run_id)  # the run's release is reused, not registered twice
        assert again.release_id == outcome.release_id
        assert again.candidate == pytest.approx(outcome.candidate)  # greedy: same answers, same numbers
        assert len([r for r in store.releases.list() if r.run_id == run_id]) == 1


def test_failing_floor_rejects_with_the_reason_stored_and_hh_skip_stated(trained, builtin_model_dir):
    root, run_dir = trained
    config = root / "gate.toml"
    config.write_text(
        f'data_dir = "{root / "data"}"\n'
        "[gate]\nhelpfulness_prompts = 4\nharmlessness_prompts = 6\nmax_new_tokens = 24\nhh_data = \"off\"\n"
        "steer_prompts = 2\nsteer_values = [0, 4]\n"
        f'[judges]\nmodel_dir = "{judge_model_dir()}"\n'
        "[gate.harmlessness]\nfloor = 1.01\ntolerance = 0.02\n"  # no share of safe answers reaches it
    )
    with Store(root / "data" / "advisor.duckdb") as store:
        ensure_base_release(store, str(builtin_model_dir))
        run_id = _succeeded_run(store, run_dir, builtin_model_dir)

    out = CliRunner().invoke(build_cli(), ["--config", str(config), "release", "gate", run_id, "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["decision"]["promote"] is False
    # The config leaves the guard and the safety policy on (their defaults): the floor is checked on
    # the system as served, the model alone only for non-inferiority.
    axes = {a["axis"]: a for a in result["decision"]["axes"]}
    harm, alone = axes["served_harmlessness"], axes["harmlessness"]
    assert not harm["passed"] and "misses the floor (at least 1.010)" in harm["reason"]
    assert re.match(r"served_harmlessness \(behind the serving guard, with the safety policy; the guard refused \d+ "
                    r"and replaced \d+ of the candidate's 6\)", harm["reason"]), harm["reason"]
    assert alone["floor"] is None and alone["reason"].startswith("harmlessness (the model alone)")
    hh = next(a for a in result["decision"]["axes"] if a["axis"] == "hh_accuracy")
    assert hh["passed"] and "gate.hh_data is off" in hh["reason"]

    with Store(root / "data" / "advisor.duckdb") as store:
        release = store.releases.get(result["release_id"])
        assert release.status == "rejected"
        assert "harmlessness" in release.decision["summary"] and "misses the floor" in release.decision["summary"]
        assert release.decision["notes"]["hh_accuracy"].startswith("gate.hh_data is off")

    listed = CliRunner().invoke(build_cli(), ["--config", str(config), "release", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {r["id"]: r["status"] for r in json.loads(listed.stdout)}[result["release_id"]] == "rejected"


def test_gate_with_url_runs_as_the_services_job(trained, builtin_model_dir, tmp_path):
    """With the service holding the database, `release gate RUN --url` gates inside it (the "gate"
    job): the decision is the job's result and the release's; nothing is promoted."""
    import time

    from service_helpers import ADMIN_TOKEN, start_service

    root, run_dir = trained
    settings = tiny_settings(tmp_path / "data", builtin_model_dir, **GATE, **{"gate.hh_data": "off"})
    live = start_service(settings)
    try:
        store = live.store
        before = store.releases.live()
        run_id = _succeeded_run(store, run_dir, builtin_model_dir)
        out = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path / "cli"), "release", "gate", run_id,
                                               "--url", live.url, "--token", ADMIN_TOKEN, "--json"])
        assert out.exit_code == 0, out.output
        job_id = json.loads(out.stdout.strip().splitlines()[-1])["job_id"]
        deadline = time.monotonic() + 600
        while (job := store.jobs.get(job_id)).status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(1)
        assert job.status == "succeeded", job.error
        release = store.releases.get(job.result["release_id"])
        assert release.run_id == run_id and release.decision["summary"] == job.result["decision"]["summary"]
        assert store.releases.live().id == before.id  # gating never promotes
        with live.admin() as admin:  # no run id: the job fails saying what it needs
            bad = admin.post("/api/admin/jobs/gate/run").json()["job_id"]
        deadline = time.monotonic() + 60
        while (job := store.jobs.get(bad)).status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job.status == "failed" and "run_id" in job.error
    finally:
        live.stop()


def test_a_second_gate_generates_only_the_candidates_answers(trained, builtin_model_dir, tmp_path, monkeypatch):
    """The live release's answers are cached by (release, prompt, generation settings), and its HH
    scores and judges' scores by (release, conversation, answer): gating again against the same live
    release generates and scores the candidate's side only, with the same numbers; a change in the
    generation settings misses the answers generated with them and their judges' scores, not the HH
    scores (the steering grid's verbosity answers have their own cap, so they are reused)."""
    import evaluator.generation

    real, generated = evaluator.generation.hf_answer_fn, []

    def counting(*args, **kwargs):
        answer = real(*args, **kwargs)
        return lambda questions: generated.append(len(questions)) or answer(questions)

    monkeypatch.setattr(evaluator.generation, "hf_answer_fn", counting)
    root, run_dir = trained
    small = {**GATE, "gate.steer_prompts": 2, "gate.steer_values": [0, 4]}  # HH: 2 shipped pairs per subset
    settings = tiny_settings(tmp_path / "data", builtin_model_dir, **small)
    with Store(settings.db_path) as store:
        base = ensure_base_release(store, str(builtin_model_dir))
        run_id = _succeeded_run(store, run_dir, builtin_model_dir)
        first = gate_candidate(store, settings, run_id)
        first_count, generated[:] = sum(generated), []
        again = gate_candidate(store, settings, run_id)
        again_count, generated[:] = sum(generated), []
        longer = tiny_settings(tmp_path / "data", builtin_model_dir, **{**small, "gate.max_new_tokens": 20})
        changed = gate_candidate(store, settings=longer, run_id=run_id)
    per_side = first.details["live"]["cached_answers"]["generated"]
    assert first.live_release_id == base.id and per_side > 0 and first.details["live"]["cached_answers"]["reused"] == 0
    assert again_count == first_count - per_side == first_count // 2  # only the candidate's answers
    assert again.details["live"]["cached_answers"] == {"reused": per_side, "generated": 0}
    assert again.live == pytest.approx(first.live) and again.candidate == pytest.approx(first.candidate)
    verbosity_rows = 2 * 2  # 2 prompts × 2 values, at gate.steer_max_new_tokens
    assert changed.details["live"]["cached_answers"] == {"reused": verbosity_rows, "generated": per_side - verbosity_rows}
    assert sum(generated) == first_count - verbosity_rows
    scored = first.details["live"]["hh"]["cached_scores"]["scored"]
    assert scored == 2 * first.details["live"]["hh"]["pairs"] and first.details["live"]["hh"]["cached_scores"]["reused"] == 0
    for later in (again, changed):
        assert later.details["live"]["hh"]["cached_scores"] == {"reused": scored, "scored": 0}
        assert later.live["hh_accuracy"] == first.live["hh_accuracy"]
    judged = first.details["live"]["cached_judge_scores"]
    # The judges' scores of live's answers; within one gate an answer drawn twice for one risky
    # prompt is judged once (`gate.harmlessness_draws`), so some are reused already.
    assert judged["scored"] > 0
    assert again.details["live"]["cached_judge_scores"] == {"reused": judged["scored"] + judged["reused"], "scored": 0}
    assert changed.details["live"]["cached_judge_scores"]["scored"] > 0  # other answers, judged afresh


def test_a_side_is_its_adapter_merged_into_the_base(trained, builtin_model_dir):
    """The gate answers with each side's adapter folded into the weights: the merged model's
    logits are the adapter-on-the-base model's up to float rounding, far closer to them than the
    base's; with no adapter it is the base itself."""
    import torch

    from deploy.release.models import load_causal_lm, load_merged

    _, run_dir = trained
    adapter = run_dir / "adapter"
    peft, tokenizer = load_causal_lm(builtin_model_dir, {"candidate": adapter})
    merged, _ = load_merged(builtin_model_dir, adapter)
    base, _ = load_merged(builtin_model_dir, None)
    assert not hasattr(merged, "peft_config") and not hasattr(base, "peft_config")
    ids = tokenizer("My roommate never does the dishes. What should I say?", return_tensors="pt")
    with torch.inference_mode():
        with_adapter, folded, bare = (m(**ids).logits for m in (peft, merged, base))
        with peft.disable_adapter():
            assert torch.equal(peft(**ids).logits, bare)
    moved = (with_adapter - bare).abs().max().item()
    assert moved > 0 and (folded - with_adapter).abs().max().item() <= 1e-2 * moved


def test_a_side_in_bfloat16_is_the_float32_side_rounded(trained, builtin_model_dir):
    """`gate.dtype` bfloat16: the merged weights are cast once, and the model's logits stay those
    of its float32 weights up to bfloat16's rounding (three significant digits)."""
    import torch

    from deploy.release.models import load_merged

    adapter = trained[1] / "adapter"
    full, tokenizer = load_merged(builtin_model_dir, adapter)
    half, _ = load_merged(builtin_model_dir, adapter, "bfloat16")
    assert {p.dtype for p in full.parameters()} == {torch.float32}
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    ids = tokenizer("My roommate never does the dishes. What should I say?", return_tensors="pt")
    with torch.inference_mode():
        a, b = full(**ids).logits, half(**ids).logits.float()
    assert (a - b).abs().max().item() <= 0.05 * a.abs().max().item()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean().item() >= 0.9


def _copy_run(store: Store, run_dir, base_model, dest) -> str:
    import shutil

    shutil.copytree(run_dir, dest)
    return _succeeded_run(store, dest, base_model)


@pytest.mark.parametrize("draws", [1, 2])
def test_a_candidate_identical_to_live_passes_every_axis(trained, builtin_model_dir, tmp_path, draws):
    """The live release is a trained adapter; the candidate is the same adapter again (a copy):
    same answers, same scores, every interval [0, 0], so every axis passes at the default
    tolerances — what an unchanged candidate must do. With sampled risky answers too: each draw
    is seeded alike on both sides, so one model draws the same answers."""
    from deploy.release.registry import promote

    root, run_dir = trained
    settings = tiny_settings(tmp_path / "data", builtin_model_dir, **GATE, **{"gate.harmlessness_draws": draws})
    with Store(settings.db_path) as store:
        ensure_base_release(store, str(builtin_model_dir))
        first = gate_candidate(store, settings, _copy_run(store, run_dir, builtin_model_dir, tmp_path / "live-run"))
        promote(store, None, first.release_id, force=True)
        outcome = gate_candidate(store, settings, _copy_run(store, run_dir, builtin_model_dir, tmp_path / "same-run"))
    assert outcome.live_release_id == first.release_id
    assert outcome.decision.promote, outcome.decision.summary()
    for axis in outcome.decision.axes:
        assert axis.passed and axis.candidate is not None and axis.candidate == pytest.approx(axis.live), axis
        assert axis.low == pytest.approx(0.0) and axis.high == pytest.approx(0.0), axis


def flat_slider_rows(n_questions: int = 24) -> list[dict]:
    """SFT rows that ignore the slider: for each corpus question the answer written for the
    default verbosity (2, or the nearest), the same answer under every verbosity value 0-4. At
    the default slider it answers as the base model does; only the steering is lost."""
    from chat.builtin.corpus import load_corpus
    from store.attributes import Attributes

    middle: dict[str, tuple[int, str]] = {}
    for ex in load_corpus():
        distance = abs(ex.attributes["verbosity"] - 2)
        if ex.question not in middle or distance < middle[ex.question][0]:
            middle[ex.question] = (distance, ex.answer)
    rows = []
    for i, (question, (_, answer)) in enumerate(list(middle.items())[:n_questions]):
        for v in range(5):
            attrs = Attributes(verbosity=v).steerlm()
            rows.append({"prompt": [{"role": "user", "content": question, "attributes": None}],
                         "chat_template_kwargs": {"attributes": attrs},
                         "completion": [{"role": "assistant", "content": answer, "attributes": attrs}],
                         "label": True, "message_id": f"m{i}-{v}", "conversation_id": f"c{i}", "source": "synthetic",
                         "categories": []})
    return rows


FLAT_STEPS, FLAT_LR = 150, 1e-3


def test_a_set_that_ignores_the_slider_is_rejected_on_steerability_alone(builtin_model_dir, tmp_path):
    from feedback.datasets import write_rows

    run_dir = tmp_path / "flat-run"
    run_dir.mkdir()
    write_rows(flat_slider_rows(), "sft", run_dir / "train.parquet")
    write_rows([], "sft", run_dir / "eval.parquet")
    cfg = config_for("sft", base_model=str(builtin_model_dir), max_steps=FLAT_STEPS, batch_size=8,
                     learning_rate=FLAT_LR, lora_alpha=64, lora_dropout=0.0)
    handle = start_run(run_dir, cfg)
    assert handle.wait(1200) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    settings = tiny_settings(tmp_path / "data", builtin_model_dir, **{
        **GATE, "gate.steer_prompts": 6, "gate.steer_values": [0, 1, 2, 3, 4], "gate.max_new_tokens": 64,
        "gate.hh_limit": 10, "gate.helpfulness_prompts": 0, "gate.harmlessness_prompts": 40})
    with Store(settings.db_path) as store:
        ensure_base_release(store, str(builtin_model_dir))
        outcome = gate_candidate(store, settings, _succeeded_run(store, run_dir, builtin_model_dir))
    axes = {a.axis: a for a in outcome.decision.axes}
    steer = axes["steerability"]
    print("flat-slider candidate:", "; ".join(a.reason for a in outcome.decision.axes))
    assert not outcome.decision.promote and not steer.passed, steer.reason
    assert steer.high < 0 and steer.low < -settings.gate.steerability.tolerance  # it lost the slider, clearly
    # The set keeps the default-slider answers, so nothing else should move: the other axes pass
    # on their items (243 advice prompts, the 40 written risky prompts, 40 HH pairs here).
    failed = [a.axis for a in outcome.decision.axes if not a.passed]
    assert failed == ["steerability"], outcome.decision.summary()
