"""The built-in model: tokenizer determinism, the chat template contract, the tiny random
model, and (slow) the real build's steering and cache behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from chat.builtin import make_tiny_random_model
from chat.builtin.corpus import tokenizer_texts
from chat.builtin.template import SPECIAL_TOKENS, render
from chat.builtin.tokenizer import train_tokenizer

ATTR = "helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:1"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return make_tiny_random_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_tokenizer_training_is_deterministic():
    texts = tokenizer_texts()
    a, b = train_tokenizer(texts, 1024), train_tokenizer(texts, 1024)
    assert a.get_vocab() == b.get_vocab()
    assert a.backend_tokenizer.to_str() == b.backend_tokenizer.to_str()
    # Special tokens keep fixed ids and are never split.
    assert [a.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert len(a("<|assistant|><|attributes|>")["input_ids"]) == 2


def test_byte_level_round_trip(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = "Ça va? 睡眠 🙂 tabs\tand\nnewlines  double  spaces"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_template_with_and_without_attributes(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "How do I sleep better?"},
        {"role": "assistant", "content": "Keep a fixed bedtime.", "attributes": ATTR},
        {"role": "user", "content": "Anything else?"},
    ]
    with_attr = tok.apply_chat_template(msgs, add_generation_prompt=True, attributes=ATTR, tokenize=False)
    assert with_attr == (
        "<|system|>\nBe kind.<|end|>\n"
        "<|user|>\nHow do I sleep better?<|end|>\n"
        f"<|assistant|>\n<|attributes|>{ATTR}\nKeep a fixed bedtime.<|end|>\n"
        "<|user|>\nAnything else?<|end|>\n"
        f"<|assistant|>\n<|attributes|>{ATTR}\n"
    )
    plain = [{**m, "attributes": None} if m["role"] == "assistant" else m for m in msgs]
    without = tok.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
    assert without.endswith("<|user|>\nAnything else?<|end|>\n<|assistant|>\n")
    assert "<|attributes|>" not in without
    assert with_attr == render(msgs, add_generation_prompt=True, attributes=ATTR)
    assert without == render(plain, add_generation_prompt=True)


def test_template_marks_assistant_tokens_for_loss(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello there.", "attributes": ATTR},
    ]
    enc = tok.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    trained = [i for i, m in zip(enc["input_ids"], enc["assistant_masks"]) if m]
    assert tok.decode(trained) == "Hello there.<|end|>"


def test_unknown_role_is_rejected(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    with pytest.raises(Exception, match="unsupported role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_tiny_model_loads_with_auto_classes(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = model.config
    assert cfg.model_type == "llama" and cfg.head_dim == 64
    assert cfg.hidden_size // cfg.num_attention_heads == 64
    assert model.dtype == torch.float32
    end_id = tok.convert_tokens_to_ids("<|end|>")
    assert tok.eos_token == "<|end|>" and tok.pad_token == "<|pad|>"
    assert model.generation_config.eos_token_id == end_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, attributes=ATTR,
        return_dict=True, return_tensors="pt",
    )
    out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[1] <= enc["input_ids"].shape[1] + 4


def test_tiny_model_is_reproducible(tmp_path):
    a = make_tiny_random_model(tmp_path / "a", seed=3)
    b = make_tiny_random_model(tmp_path / "b", seed=3)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert json.loads((a / "tokenizer.json").read_text()) == json.loads((b / "tokenizer.json").read_text())


# ---------------------------------------------------------------- corpus


def test_corpus_is_regenerated_from_its_source():
    """corpus.jsonl is committed; it must be exactly what corpus_source.py writes."""
    from chat.builtin.corpus import CORPUS_PATH
    from tools.data.corpus_source import records

    on_disk = [json.loads(line) for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert on_disk == records(), "regenerate with `python -m tools.data.corpus_source`"


def test_corpus_size_topics_and_labels():
    from chat.builtin.corpus import load_corpus
    from store.attributes import Attributes

    examples = load_corpus()
    assert len(examples) >= 300
    topics = {e.topic for e in examples}
    assert {"sleep", "money", "work", "friends", "family", "travel", "studying", "health"} <= topics
    for e in examples:
        Attributes.from_dict(e.attributes)  # every label is a valid 0-4 attribute set
        assert e.question.strip() and e.answer.strip()
    questions_with_many_settings = {e.question for e in examples}
    assert len(questions_with_many_settings) >= 60


def test_corpus_verbosity_sets_length_and_complexity_sets_grade():
    from statistics import mean

    from chat.builtin.corpus import load_corpus

    good = [e for e in load_corpus() if e.attributes["helpfulness"] >= 3]

    def words(v: int) -> float:
        return mean(len(e.answer.split()) for e in good if e.attributes["verbosity"] == v)

    lengths = [words(v) for v in range(5)]
    assert lengths == sorted(lengths) and lengths[4] >= 4 * lengths[0]

    def word_len(c: int) -> float:  # a proxy for reading grade that needs no syllable dictionary
        texts = [e.answer for e in good if e.attributes["complexity"] == c]
        return mean(mean(len(w) for w in t.split()) for t in texts)

    grades = [word_len(c) for c in range(5)]
    assert grades[4] > grades[2] > grades[0]


def test_held_out_questions_are_not_in_the_corpus():
    from chat.builtin.check import HELD_OUT_QUESTIONS
    from chat.builtin.corpus import load_corpus

    asked = {e.question.lower() for e in load_corpus()}
    assert not [q for q in HELD_OUT_QUESTIONS if q.lower() in asked]


def test_training_encoding_matches_the_template(tiny_dir):
    """Pieces tokenised separately give the same ids as the rendered conversation, and only
    the answers (with their <|end|>) carry labels."""
    from chat.builtin.sft import encode

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    msgs = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "How do I save money?"},
        {"role": "assistant", "content": "Write down what you spend.", "attributes": ATTR},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "Cut one cost.", "attributes": None},
    ]
    enc = encode(msgs, tok, max_len=1024)
    assert enc.input_ids == tok(render(msgs), add_special_tokens=False)["input_ids"]
    trained = tok.decode([i for i, lab in zip(enc.input_ids, enc.labels) if lab != -100])
    assert trained == "Write down what you spend.<|end|>Cut one cost.<|end|>"


# ---------------------------------------------------------------- build machinery (small recipe)


@pytest.fixture
def small_recipe(tmp_path):
    """The real build code on a 24-example corpus and a tiny model: seconds, not minutes."""
    from chat.builtin.build import Recipe
    from chat.builtin.corpus import CORPUS_PATH
    from chat.builtin.model import TINY_SHAPE
    from chat.builtin.sft import TrainConfig

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(CORPUS_PATH.read_text(encoding="utf-8").splitlines(keepends=True)[:24]))
    return Recipe(vocab_size=512, shape=TINY_SHAPE, train=TrainConfig(epochs=1, batch_size=8), corpus_path=corpus)


def test_build_caches_by_recipe_and_reports_progress(tmp_path, small_recipe):
    from dataclasses import replace

    from chat.builtin.build import INFO_FILE, build_builtin_model, builtin_model_path

    seen = []
    path = build_builtin_model(tmp_path / "data", recipe=small_recipe, progress=lambda *a: seen.append(a))
    assert path == builtin_model_path(tmp_path / "data", small_recipe)
    assert path.parent == tmp_path / "data" / "models" and path.name.startswith("builtin-")
    info = json.loads((path / INFO_FILE).read_text())
    assert info["steps"] == len(seen) == seen[-1][1] == seen[-1][0] == 3
    assert AutoModelForCausalLM.from_pretrained(path).config.head_dim == 64
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temp dirs left

    mtime = (path / INFO_FILE).stat().st_mtime_ns
    assert build_builtin_model(tmp_path / "data", recipe=small_recipe, progress=lambda *a: seen.append(a)) == path
    assert len(seen) == 3 and (path / INFO_FILE).stat().st_mtime_ns == mtime  # cached: no training

    forced = build_builtin_model(tmp_path / "data", recipe=small_recipe, force=True)
    assert forced == path and (path / INFO_FILE).stat().st_mtime_ns != mtime

    # Any ingredient changes the recipe hash, hence the directory.
    other = replace(small_recipe, train=replace(small_recipe.train, lr=1e-3))
    assert builtin_model_path(tmp_path / "data", other) != path
    small_recipe.corpus_path.write_text(small_recipe.corpus_path.read_text()[:-200] + "\n")
    assert builtin_model_path(tmp_path / "data", small_recipe) != path


def test_interrupted_build_leaves_nothing_that_looks_built(tmp_path, small_recipe):
    from chat.builtin.build import build_builtin_model, builtin_model_path, is_built

    def boom(step, total, loss):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_builtin_model(tmp_path / "data", recipe=small_recipe, progress=boom)
    assert not is_built(builtin_model_path(tmp_path / "data", small_recipe))
    assert not builtin_model_path(tmp_path / "data", small_recipe).exists()
    # The next call builds normally.
    assert is_built(build_builtin_model(tmp_path / "data", recipe=small_recipe))


def test_training_is_deterministic(tmp_path, small_recipe):
    from chat.builtin.build import build_builtin_model

    a = build_builtin_model(tmp_path / "a", recipe=small_recipe)
    b = build_builtin_model(tmp_path / "b", recipe=small_recipe)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_the_shipped_build_is_the_current_recipes_and_is_used_without_training(tmp_path):
    from chat.builtin.build import INFO_FILE, PREBUILT, Recipe, build_builtin_model, shipped_recipe_hash

    assert shipped_recipe_hash() == Recipe().digest(), (
        "chat/builtin/prebuilt/ was built from another recipe: run `advisor --data-dir /tmp/b model build "
        "--model builtin --force` and copy /tmp/b/models/builtin-<hash>/* into chat/builtin/prebuilt/")
    path = build_builtin_model(tmp_path / "data", progress=lambda *a: pytest.fail("trained instead of copying"))
    assert (path / "model.safetensors").read_bytes() == (PREBUILT / "model.safetensors").read_bytes()
    assert json.loads((path / INFO_FILE).read_text())["recipe_hash"] in path.name


# ---------------------------------------------------------------- the real build (slow)


@pytest.mark.slow
def test_builtin_model_steers_length_and_is_cached(builtin_model_dir):
    from chat.builtin import build_builtin_model, builtin_model_path
    from chat.builtin.build import INFO_FILE
    from chat.builtin.check import measure_steering

    info = json.loads((builtin_model_dir / INFO_FILE).read_text())
    assert info["recipe_hash"] in builtin_model_dir.name
    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir)
    assert model.config.head_dim == 64 and model.config.model_type == "llama"

    report = measure_steering(builtin_model_dir)
    assert report.verbosity_ratio >= 1.5, report
    assert report.grade_by_complexity[4] > report.grade_by_complexity[0], report

    # Cache reuse: same directory, nothing rebuilt (the info file is untouched).
    data_dir = builtin_model_dir.parent.parent
    before = (builtin_model_dir / INFO_FILE).stat().st_mtime_ns
    assert build_builtin_model(data_dir) == builtin_model_dir == builtin_model_path(data_dir)
    assert (builtin_model_dir / INFO_FILE).stat().st_mtime_ns == before
