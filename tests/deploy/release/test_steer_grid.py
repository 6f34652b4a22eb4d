"""The gate's steering grid gives verbosity answers room to be long: words are what verbosity is
measured by, and at the gate's usual cap (64 tokens) SmolLM2's answers from verbosity 1 up all end
at the cap (bench/steer_cap.py), so the axis would measure the cap, not the slider. Complexity,
read per sentence and word, keeps the usual cap."""

from __future__ import annotations

from deploy.release import measure
from deploy.settings import load_settings
from evaluator.steerability import score


def _fake_answer_fn(calls: list[int]):
    """An `_answer_fn` whose answers are as long as the verbosity slider asks, cut at the cap
    (about 0.75 words a token); records each call's cap (cells run side by side: in any order)."""
    def answer_fn(model, tokenizer, settings, attributes, *, cache=None, max_new_tokens=None, batch_size=None,
                  streams=None):
        assert streams == 1  # the grid runs its cells side by side, each cell in one stream
        tokens = max_new_tokens or settings.gate.max_new_tokens
        calls.append(tokens)
        wanted = 20 + 60 * attributes.verbosity
        return lambda questions: [" ".join(["word"] * min(wanted, int(tokens * 0.75))) + "." for _ in questions]
    return answer_fn


def test_verbosity_rows_get_their_own_cap_and_complexity_rows_the_gates(monkeypatch):
    prompts = ["How do I stop hitting snooze?", "How do I split bills?"]
    calls: list[int] = []
    monkeypatch.setattr(measure, "_answer_fn", _fake_answer_fn(calls))
    settings = load_settings(environ={}, overrides={"gate.max_new_tokens": 64, "gate.steer_max_new_tokens": 256})
    rows = measure.steer_grid(None, None, settings, prompts)

    n = len(settings.gate.steer_values)
    assert [r.attribute for r in rows[::2]] == ["verbosity"] * n + ["complexity"] * n  # the grid's order
    assert sorted(calls) == [64] * n + [256] * n
    assert score(rows)["rho_verbosity"] > 0.9  # 20 to 260 words: the slider shows

    calls.clear()
    capped = load_settings(environ={}, overrides={"gate.max_new_tokens": 64, "gate.steer_max_new_tokens": 64})
    flat = measure.steer_grid(None, None, capped, prompts)
    assert score(flat)["rho_verbosity"] < score(rows)["rho_verbosity"]  # from verbosity 1 up, all at the cap
