"""Trainer configs, the CPU scaling rule, and runs that must refuse their data (no model needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from feedback.datasets import write_rows
from trainer.config import ConfigError, config_for, config_from_dict, effective_config
from trainer.process import RunError, start_run, wait_for
from trainer.rundir import EXIT_BAD_DATA, read_metadata, run_state


def test_defaults_are_advisorqa_table_9():
    for method in ("sft", "kto", "dpo"):
        cfg = config_for(method, base_model="m")
        assert (cfg.epochs, cfg.learning_rate, cfg.batch_size, cfg.max_length) == (2.0, 5e-6, 32, 512)
        assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (64, 16, 0.1)
    assert config_for("dpo").beta == 0.1 and config_for("dpo").loss_type == "sigmoid"
    assert config_for("kto").beta == 0.1
    cfg = config_for("kto", base_model="m", max_steps=7)
    assert config_from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ConfigError, match="unknown kto config option"):
        config_for("kto", betta=0.2)
    with pytest.raises(ConfigError, match="unknown training method"):
        config_for("ppo")
    with pytest.raises(ConfigError, match="learning_rate must be > 0"):
        config_for("sft", learning_rate=0)


def test_cpu_scaling_rule_and_cuda_untouched():
    cfg = config_for("dpo", base_model="m")
    cpu = effective_config(cfg, cuda=False, n_train=10_000)
    assert (cpu.device, cpu.quantize) == ("cpu", False)
    assert (cpu.config.batch_size, cpu.config.max_length) == (8, 384)
    assert cpu.config.learning_rate == 2e-4 and cpu.config.max_steps == 300 and cpu.total_steps == 300
    assert set(cpu.changes) == {"batch_size", "max_length", "learning_rate", "max_steps"}
    small = effective_config(cfg, cuda=False, n_train=20)  # 2 epochs of 3 steps: under the cap
    assert small.total_steps == 6 and "max_steps" not in small.changes
    gpu = effective_config(cfg, cuda=True, n_train=10_000)
    assert (gpu.device, gpu.quantize, gpu.changes) == ("cuda", True, {})
    assert gpu.config == cfg and gpu.total_steps == 2 * 313
    off = effective_config(config_for("sft", cpu_scaling=False), cuda=False, n_train=64)
    assert off.changes == {} and off.config.learning_rate == 5e-6
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        effective_config(config_for("kto", quantize="4bit"), cuda=False, n_train=8)


def _run_bad(run_dir, rows_or_table, method="kto"):
    run_dir.mkdir()
    if isinstance(rows_or_table, pa.Table):
        pq.write_table(rows_or_table, run_dir / "train.parquet")
    else:
        write_rows(rows_or_table, method, run_dir / "train.parquet")
    handle = start_run(run_dir, config_for(method, base_model=str(run_dir / "no-model")))
    code = handle.wait(120)
    return code, read_metadata(run_dir), run_state(run_dir)


def _assert_untouched(run_dir):
    assert not (run_dir / "adapter").exists() and not (run_dir / "checkpoints").exists()


def test_empty_data_stops_at_once_with_a_clear_message(tmp_path):
    code, meta, state = _run_bad(tmp_path / "run", [])
    assert code == EXIT_BAD_DATA
    assert meta["status"] == "failed" and state.status == "failed"
    assert "has no rows: there is nothing to train on" in meta["error"]
    assert "nothing to train on" in (tmp_path / "run" / "train.log").read_text()
    _assert_untouched(tmp_path / "run")


def test_malformed_data_is_named_by_row_and_field(tmp_path):
    bad = [{"prompt": [{"role": "assistant", "content": "hi", "attributes": None}],
            "completion": [{"role": "assistant", "content": "x", "attributes": None}], "label": True,
            "chat_template_kwargs": {"attributes": None}}]
    code, meta, _ = _run_bad(tmp_path / "a", bad)
    assert code == EXIT_BAD_DATA and "train.parquet row 0 prompt: must end with a user message" in meta["error"]

    code, meta, _ = _run_bad(tmp_path / "b", pa.table({"text": ["just text"]}))
    assert code == EXIT_BAD_DATA and "lacks column(s) ['prompt', 'completion', 'label'" in meta["error"]

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train.parquet").write_text("not parquet")
    handle = start_run(tmp_path / "c", config_for("dpo", base_model="m"))
    assert handle.wait(120) == EXIT_BAD_DATA
    assert "not a readable Parquet file" in read_metadata(tmp_path / "c")["error"]
    for name in "abc":
        _assert_untouched(tmp_path / name)


def test_instruct_steering_trains_on_the_prompt_the_model_answered(tmp_path):
    """A general chat model was steered by instructions after the user's question (the chat's
    `instruct` mode); its template ignores the SteerLM kwarg. Trained on the bare question, it
    would learn from prompts nobody sent it, so the snapshot is rendered the way the chat rendered
    it, by the same function; the stored rows and their hash stay as built."""
    from chat.steering import render
    from store.attributes import Attributes
    from trainer.data import DataError, load_snapshot

    attrs = Attributes(verbosity=0, complexity=1)
    history = [{"role": "user", "content": "My roommate never cleans.", "attributes": None},
               {"role": "assistant", "content": "Talk to them.", "attributes": Attributes().steerlm()},
               {"role": "user", "content": "How do I start?", "attributes": None}]
    answer = [{"role": "assistant", "content": "Pick a calm moment.", "attributes": attrs.steerlm()}]
    row = {"prompt": history, "completion": answer, "label": True,
           "chat_template_kwargs": {"attributes": attrs.steerlm()}}
    (tmp_path / "run").mkdir()
    write_rows([row], "kto", tmp_path / "run" / "train.parquet")

    steerlm_rows, _, steerlm_hash = load_snapshot(tmp_path / "run", "kto")
    assert steerlm_rows[0]["prompt"][-1]["content"] == "How do I start?"
    assert steerlm_rows[0]["chat_template_kwargs"] == {"attributes": attrs.steerlm()}

    rows, _, data_hash = load_snapshot(tmp_path / "run", "kto", "instruct")
    served, kwarg = render(history, attrs, "instruct")
    assert rows[0]["prompt"] == served and kwarg is None
    assert rows[0]["prompt"][-1]["content"].startswith("How do I start?\n\nAnswer in one or two sentences")
    assert rows[0]["chat_template_kwargs"] == {"attributes": None}
    assert rows[0]["completion"] == [{"role": "assistant", "content": "Pick a calm moment."}]
    assert data_hash == steerlm_hash

    row["chat_template_kwargs"] = {"attributes": "verbosity:9"}
    write_rows([row], "kto", tmp_path / "run" / "train.parquet")
    with pytest.raises(DataError, match="not a SteerLM string"):
        load_snapshot(tmp_path / "run", "kto", "instruct")
    with pytest.raises(ConfigError, match="steering must be steerlm or instruct"):
        config_for("kto", steering="system")


def test_start_run_refuses_a_directory_without_data(tmp_path):
    with pytest.raises(RunError, match="no train.parquet"):
        start_run(tmp_path, config_for("kto"))


def test_run_module_usage_error():
    out = subprocess.run([sys.executable, "-m", "trainer.run"], capture_output=True, text=True, timeout=60)
    assert out.returncode == EXIT_BAD_DATA and "usage" in out.stderr


def test_wait_for_returns_final_state(tmp_path):
    code, meta, state = _run_bad(tmp_path / "run", [])
    assert wait_for(tmp_path / "run", timeout=5).status == "failed"


def test_launch_with_no_examples_records_the_reason_and_starts_nothing(store, tmp_path):
    from trainer.launch import LaunchRequest, launch_training, should_train

    run = launch_training(store, LaunchRequest(method="dpo", runs_dir=tmp_path / "runs", base_model="m"))
    assert run.status == "failed" and "no training examples for dpo" in run.error
    assert store.jobs.get(run.job_id).status == "failed"
    assert not (tmp_path / "runs" / run.id / "pid").exists()  # no subprocess
    assert not (tmp_path / "runs" / "train.lock").exists()
    assert should_train(store, 5) == (False, "0 new feedback item(s) since the last training run "
                                             f"({run.created_at:%Y-%m-%d %H:%M}); waiting for 5")


def test_cli_dataset_build_and_train_without_examples(tmp_path):
    from typer.testing import CliRunner

    from deploy.wiring import build_cli
    from store import GenerationMeta, Store
    from store.attributes import Attributes

    with Store(tmp_path / "advisor.duckdb") as store:
        for value in (1, -1):
            conv = store.conversations.create("alice")
            q = store.conversations.add_message(conv.id, "user", f"Question {value}?")
            a = store.conversations.add_message(conv.id, "assistant", f"Answer {value}.", parent_id=q.id,
                                                generation=GenerationMeta(backend="t", model="m", attributes=Attributes()))
            store.conversations.rate(a.id, "alice", value)
    # The moderator alone filters here: the trained judge reads SmolLM2, which this data dir lacks.
    app, runner = build_cli(), CliRunner(env={"ADVISOR_JUDGES__KIND": "fallback"})
    out = runner.invoke(app, ["--data-dir", str(tmp_path), "dataset", "build", "--kind", "kto",
                              "--out", str(tmp_path / "ds"), "--eval-fraction", "0", "--json"])
    assert out.exit_code == 0, out.output
    card = json.loads(out.stdout)
    assert card["labels"] == {"desirable": 1, "undesirable": 1} and (tmp_path / "ds" / "train.parquet").exists()

    out = runner.invoke(app, ["--data-dir", str(tmp_path), "train", "--method", "dpo", "--base-model", "m"])
    assert out.exit_code == 1 and "no training examples for dpo" in out.output
    out = runner.invoke(app, ["--data-dir", str(tmp_path), "runs", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)[0]["status"] == "failed"


@pytest.mark.parametrize("steering", ["steerlm", "instruct"])
def test_the_service_trains_with_its_own_steering_mode(store, tmp_path, steering):
    """The served model's steering mode reaches the run's config, so its snapshot is rendered as
    that model saw its prompts (the test above)."""
    from service_helpers import tiny_settings

    from deploy.loop.training import start_training
    from feedback.datasets import AcceptEverythingFilter

    settings = tiny_settings(tmp_path / "data", tmp_path / "model", **{"backend.steering": steering})
    run = start_training(store, settings, method="kto", safety_filter=AcceptEverythingFilter())
    assert run.status == "failed" and "no training examples" in run.error  # the config is recorded anyway
    assert store.jobs.get_training_run(run.id).config["steering"] == steering


def test_dpo_sft_weight_adds_the_chosen_answers_likelihood_term(tmp_path):
    """RPO's form: DPO's loss plus a per-token NLL on the chosen answers at `sft_weight`; 0 is plain DPO."""
    from trainer.run import trl_args

    weights = {"desirable_weight": 1.0, "undesirable_weight": 1.0}
    plain = trl_args(effective_config(config_for("dpo", base_model="m"), cuda=False, n_train=16), tmp_path, 16, weights)
    assert plain.loss_type == ["sigmoid"] and plain.loss_weights == [1.0]
    rpo = effective_config(config_for("dpo", base_model="m", sft_weight=0.5), cuda=False, n_train=16)
    args = trl_args(rpo, tmp_path, 16, weights)
    assert args.loss_type == ["sigmoid", "sft"] and args.loss_weights == [1.0, 0.5]
    with pytest.raises(ConfigError, match="sft_weight must be"):
        config_for("dpo", sft_weight=-1.0)


def test_speed_and_priority_options_are_checked_and_reach_trl(tmp_path):
    from trainer.run import trl_args

    for method in ("kto", "dpo"):
        cfg = config_for(method, base_model="m")
        assert cfg.precompute_ref_log_probs and not cfg.cpu_bf16 and (cfg.nice, cfg.torch_threads) == (19, 0)
        eff = effective_config(cfg, cuda=False, n_train=16)
        weights = {"desirable_weight": 1.0, "undesirable_weight": 1.0}
        assert trl_args(eff, tmp_path, 16, weights).precompute_ref_log_probs is True
        off = effective_config(config_for(method, base_model="m", precompute_ref_log_probs=False), cuda=False, n_train=16)
        assert trl_args(off, tmp_path, 16, weights).precompute_ref_log_probs is False
        assert trl_args(eff, tmp_path, 16, weights).bf16 is False
        bf16 = effective_config(config_for(method, base_model="m", cpu_bf16=True), cuda=False, n_train=16)
        assert trl_args(bf16, tmp_path, 16, weights).bf16 is True  # autocast on the CPU
    assert not hasattr(config_for("sft"), "precompute_ref_log_probs")
    with pytest.raises(ConfigError, match="nice must be in 0..19"):
        config_for("kto", nice=20)
    with pytest.raises(ConfigError, match="torch_threads must be"):
        config_for("dpo", torch_threads=-1)


LOWER = "import json, sys; from trainer.run import lower_priority; print(json.dumps(lower_priority(int(sys.argv[1]))))"


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="kernel without scheduler autogroups")
def test_a_run_lowers_its_niceness_and_its_own_sessions_autogroup():
    """As `start_run` starts it (a session of its own), the run lowers its autogroup too: plain
    niceness does not rank it below another session's processes. Started from a shell, it leaves
    the shell's session alone."""
    def lower(nice, new_session):
        out = subprocess.run([sys.executable, "-c", LOWER, str(nice)], capture_output=True, text=True, timeout=60,
                             start_new_session=new_session, check=True)
        return json.loads(out.stdout)

    leader = lower(19, True)
    assert leader["nice"] == 19 and leader["autogroup"].endswith("nice 19")
    child = lower(19, False)
    assert child["nice"] == 19 and child["autogroup"] == "unchanged (not a session leader)"
    assert lower(0, True) == {}
