"""Steering renderings: SteerLM string into the template kwarg, or instructions in the system message."""

from __future__ import annotations

import pytest

from chat.builtin.template import render as render_template
from chat.steering import instructions, preview, render
from feedback.attributes import LEVEL_WORDS, Attributes

MESSAGES = [
    {"role": "user", "content": "How do I sleep better?"},
    {"role": "assistant", "content": "Keep a schedule.", "attributes": "helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:1"},
    {"role": "user", "content": "More please."},
]


def test_steerlm_puts_the_string_in_the_template_kwarg():
    attrs = Attributes(verbosity=4, complexity=0)
    msgs, kwarg = render(MESSAGES, attrs, "steerlm")
    assert kwarg == attrs.steerlm() == "helpfulness:4,correctness:4,coherence:4,complexity:0,verbosity:4"
    assert msgs == MESSAGES and msgs is not MESSAGES  # copied, earlier answers keep their attributes
    prompt = render_template(msgs, add_generation_prompt=True, attributes=kwarg)
    assert prompt.endswith("<|assistant|>\n<|attributes|>" + kwarg + "\n")
    assert "<|attributes|>helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:1\nKeep a schedule." in prompt


def test_steerlm_without_attributes_leaves_the_prompt_unsteered():
    msgs, kwarg = render(MESSAGES, None, "steerlm")
    assert kwarg is None
    assert render_template(msgs, add_generation_prompt=True, attributes=kwarg).endswith("<|assistant|>\n")


def test_instruct_adds_a_system_message_with_level_words():
    attrs = Attributes(verbosity=0, complexity=4)
    msgs, kwarg = render(MESSAGES, attrs, "instruct")
    assert kwarg is None
    assert msgs[0]["role"] == "system"
    assert LEVEL_WORDS["verbosity"][0] in msgs[0]["content"]
    assert LEVEL_WORDS["complexity"][4] in msgs[0]["content"]
    assert all("attributes" not in m for m in msgs)  # a general model's template never sees SteerLM keys
    assert [m["content"] for m in msgs[1:]] == [m["content"] for m in MESSAGES]
    assert "attributes" in MESSAGES[1]  # input untouched


def test_instruct_merges_with_an_existing_system_message():
    attrs = Attributes(verbosity=3)
    msgs, _ = render([{"role": "system", "content": "You are kind."}, *MESSAGES], attrs, "instruct")
    assert sum(m["role"] == "system" for m in msgs) == 1
    assert msgs[0]["content"].startswith("You are kind.\n\n")
    assert msgs[0]["content"].endswith(instructions(attrs))


@pytest.mark.parametrize("level", range(5))
def test_every_level_renders_differently(level):
    text = instructions(Attributes(verbosity=level))
    assert f"{LEVEL_WORDS['verbosity'][level]} (verbosity {level}/4)" in text
    assert preview(Attributes(verbosity=level, complexity=1)) == f"{LEVEL_WORDS['verbosity'][level]} · plain language"


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="steering mode"):
        render(MESSAGES, Attributes(), "telepathy")
