"""`advisor ask`: bad input is refused before anything is written; a turn streams and is logged
like the web app's; on the built-in model, verbosity really changes answer length."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from service_helpers import judge_model_dir
from typer.testing import CliRunner

from deploy.wiring import build_cli
from store import Store

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def app():
    return build_cli()


def invoke(app, data_dir: Path, *args: str, env: dict | None = None, input: str | None = None):
    return CliRunner().invoke(app, ["--data-dir", str(data_dir), *args], env=env or {}, input=input)


@pytest.fixture
def tiny_env(tiny_model_dir) -> dict:
    # The guard's verdicts on the tiny model's gibberish would be arbitrary; test_guard_service.py tests it.
    return {"ADVISOR_BACKEND__KIND": "transformers", "ADVISOR_BACKEND__MODEL": str(tiny_model_dir),
            "ADVISOR_BACKEND__DEVICE": "cpu", "ADVISOR_GUARD__ENABLED": "false"}


BAD_INPUTS = [
    (["ask", ""], "empty"),
    (["ask", "   \n  "], "empty"),
    (["ask", "x" * 200_000], "200,000 characters"),
    (["ask", "hello\x00world"], "control characters"),
    (["ask", "hi\x1b[31m"], "control characters"),
    (["ask", "hello", "--verbosity", "7"], "between 0 and 4, got 7"),
    (["ask", "hello", "--verbosity", "-1"], "between 0 and 4, got -1"),
    (["ask", "hello", "--complexity", "x"], "must be an integer 0-4, got 'x'"),
    (["ask", "hello", "--helpfulness", "2.5"], "must be an integer 0-4"),
    (["ask", "hello", "--temperature", "9"], "temperature"),
    (["ask", "hello", "--max-new-tokens", "0"], "max_new_tokens"),
    (["ask", "hello", "--user", ""], "user id is empty"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_clear_line_exit_2_and_nothing_stored(app, tmp_path, args, message):
    result = invoke(app, tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    assert "Traceback" not in result.output and result.stdout == ""
    assert not (tmp_path / "advisor.duckdb").exists()  # not even created


def test_a_200kb_question_on_stdin_is_refused(app, tmp_path):
    result = invoke(app, tmp_path, "ask", "-", input="y" * 200_000)
    assert result.exit_code == 2 and "the limit is 8,000" in result.stderr
    assert not (tmp_path / "advisor.duckdb").exists()


def test_ask_streams_the_answer_and_logs_the_turn(app, tmp_path, tiny_env):
    result = invoke(app, tmp_path, "ask", "How do I stop procrastinating?", "--verbosity", "3",
                    "--complexity", "1", "--max-new-tokens", "16", "--seed", "7", "--user", "u1", env=tiny_env)
    assert result.exit_code == 0, result.output
    conv_id = result.stderr.strip().splitlines()[-1].removeprefix("conversation: ")
    follow = invoke(app, tmp_path, "ask", "And on weekends?", "--conversation", conv_id, "--user", "u1",
                    "--max-new-tokens", "8", "--json", env=tiny_env)
    assert follow.exit_code == 0, follow.output
    record = json.loads(follow.stdout)
    assert record["conversation_id"] == conv_id and record["status"] == "complete"
    assert record["attributes"]["verbosity"] == 2  # not given: the default
    with Store(tmp_path / "advisor.duckdb") as store:
        conv = store.conversations.get(conv_id, user_id="u1")
        assert conv.source == "cli" and conv.title == "How do I stop procrastinating?"
        q1, a1, q2, a2 = store.conversations.thread(conv_id)
        assert a1.content == result.stdout.rstrip("\n")  # stdout is exactly the answer
        assert (a1.generation.attributes.verbosity, a1.generation.attributes.complexity) == (3, 1)
        assert a1.generation.seed == 7 and a1.generation.max_new_tokens == 16
        assert a1.generation.backend == "transformers" and a1.generation.steering == "instruct"
        assert q2.parent_id == a1.id and a2.id == record["answer_id"] and a2.content == record["answer"]


def test_another_users_conversation_is_refused(app, tmp_path, tiny_env):
    result = invoke(app, tmp_path, "ask", "Mine", "--user", "owner", "--max-new-tokens", "4", env=tiny_env)
    conv_id = result.stderr.strip().splitlines()[-1].removeprefix("conversation: ")
    with Store(tmp_path / "advisor.duckdb") as store:
        before = store.stats()["rows"]
    other = invoke(app, tmp_path, "ask", "Let me in", "--user", "intruder", "--conversation", conv_id, env=tiny_env)
    assert other.exit_code == 2 and "No conversation" in other.stderr
    with Store(tmp_path / "advisor.duckdb") as store:
        assert store.stats()["rows"] == before


def test_server_down_logs_the_question_and_says_what_to_do(app, tmp_path):
    env = {"ADVISOR_BACKEND__KIND": "openai", "ADVISOR_BACKEND__BASE_URL": "http://127.0.0.1:9/v1",
           "ADVISOR_BACKEND__MODEL": "m", "ADVISOR_BACKEND__MAX_RETRIES": "0", "ADVISOR_GUARD__ENABLED": "false"}
    result = invoke(app, tmp_path, "ask", "Anyone home?", env=env)
    assert result.exit_code == 1
    assert "Cannot reach the model server at http://127.0.0.1:9/v1" in result.stderr
    with Store(tmp_path / "advisor.duckdb") as store:
        (conv,) = store.conversations.list("cli")
        question, answer = store.conversations.get_messages(conv.id)
        assert question.content == "Anyone home?" and answer.status == "error"


def test_a_locked_database_names_the_holder(app, tmp_path):
    db = tmp_path / "advisor.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from store import Store
            s = Store({str(db)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        result = invoke(app, tmp_path, "ask", "hello")
        assert result.exit_code == 1
        assert f"in use by PID {holder.pid}" in result.stderr
        assert "DuckDB lets only one process open it" in result.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


# --------------------------------------------------------------------------- the built-in model

QUESTIONS = [
    "How can I fall asleep faster at night?",
    "How do I start saving money on a small salary?",
    "How should I ask my manager for a raise?",
    "What can I do when a friend keeps cancelling plans?",
    "How do I handle an argument with my sister?",
    "How can I pack light for a week-long trip?",
    "What is a good way to study for an exam?",
    "How do I drink more water during the day?",
    "How can I stop checking my phone all the time?",
    "How do I get back into exercise after a long break?",
]


@pytest.mark.slow
def test_verbosity_changes_answer_length_and_every_turn_is_exported(app, tmp_path, builtin_model_dir):
    # The data dir points at the cached build, so `ask` finds the model instead of building it.
    models = tmp_path / "models"
    models.mkdir()
    (models / builtin_model_dir.name).symlink_to(builtin_model_dir, target_is_directory=True)
    lengths: dict[int, list[int]] = {0: [], 4: []}
    conversations: dict[str, tuple[str, int]] = {}
    for i, question in enumerate(QUESTIONS):
        for verbosity in (0, 4):
            result = invoke(app, tmp_path, "ask", question, "--verbosity", str(verbosity), "--seed", str(i),
                            "--user", "bench", env={"ADVISOR_BACKEND__KIND": "builtin", "ADVISOR_BACKEND__DEVICE": "cpu",
                                                    "ADVISOR_GUARD__ENABLED": "false"})  # lengths, not refusals
            assert result.exit_code == 0, result.output
            conv_id = result.stderr.strip().splitlines()[-1].removeprefix("conversation: ")
            conversations[conv_id] = (question, verbosity)
            lengths[verbosity].append(len(result.stdout.split()))
    ratio = statistics.mean(lengths[4]) / max(statistics.mean(lengths[0]), 1e-9)
    print(f"mean words: verbosity 0 = {statistics.mean(lengths[0]):.1f}, 4 = {statistics.mean(lengths[4]):.1f}, ratio {ratio:.2f}")
    assert ratio >= 1.5

    export = invoke(app, tmp_path, "export", "--format", "jsonl")
    assert export.exit_code == 0, export.output
    records = {r["id"]: r for r in map(json.loads, export.stdout.splitlines())}
    assert set(conversations) <= set(records)
    for conv_id, (question, verbosity) in conversations.items():
        user, assistant = records[conv_id]["messages"]
        assert user["content"] == question and assistant["role"] == "assistant"
        gen = assistant["generation"]
        assert gen["attributes"] == {"helpfulness": 4, "correctness": 4, "coherence": 4, "complexity": 2,
                                     "verbosity": verbosity}
        assert gen["backend"] == "builtin" and gen["steering"] == "steerlm" and gen["model"] == builtin_model_dir.name


def test_make_backend_follows_the_settings(tiny_model_dir, tmp_path):
    from chat.backends import OpenAICompatibleBackend
    from chat.backends.transformers_backend import TransformersBackend
    from deploy.serving.factory import make_backend, sampling_params
    from deploy.settings import SettingsError, load_settings

    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path), "backend.kind": "transformers",
                                                    "backend.model": str(tiny_model_dir), "backend.device": "cpu"})
    backend = make_backend(settings)
    assert isinstance(backend, TransformersBackend) and backend.model == str(tiny_model_dir)
    backend.close()
    with pytest.raises(SettingsError, match="backend.model"):
        make_backend(load_settings(environ={}, overrides={"data_dir": str(tmp_path), "backend.kind": "transformers"}))
    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path), "backend.kind": "openai",
                                                    "backend.base_url": "http://127.0.0.1:9/v1", "backend.model": "m"})
    remote = make_backend(settings)  # no network until the first request
    assert isinstance(remote, OpenAICompatibleBackend) and remote.model == "m"
    assert settings.steering_mode == "instruct"
    params = sampling_params(settings, temperature=0.0, seed=3)
    assert (params.temperature, params.seed, params.max_new_tokens) == (0.0, 3, settings.backend.max_new_tokens)


def test_building_the_model_shows_a_progress_bar(app, tmp_path, tiny_model_dir, monkeypatch):
    """The first `ask` on a fresh data dir builds the built-in model behind a Rich progress bar.
    The build itself is minutes, so here it is the tiny model reporting three training steps."""
    import deploy.cli.chat as cli_chat
    from chat.backends.transformers_backend import TransformersBackend

    def fake_build(settings, progress=None, say=None):
        for step in range(1, 4):
            progress(step, 3, 1.0 / step)
        return TransformersBackend(tiny_model_dir, device="cpu", kind="builtin", name="builtin-test")

    monkeypatch.setenv("ADVISOR_BACKEND__KIND", "builtin")
    monkeypatch.setenv("ADVISOR_JUDGES__MODEL_DIR", str(judge_model_dir()))  # the guard's judge reads SmolLM2
    monkeypatch.setattr(cli_chat, "model_needs_build", lambda settings: True)
    monkeypatch.setattr(cli_chat, "make_backend", fake_build)
    result = invoke(app, tmp_path, "ask", "Hi", "--max-new-tokens", "4")
    assert result.exit_code == 0, result.output
    assert "Building the built-in model" in result.stderr and "3/3 steps" in result.stderr
