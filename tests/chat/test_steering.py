"""Steering renderings: SteerLM string into the template kwarg, or instructions after the last user message."""

from __future__ import annotations

import pytest

from chat.builtin.template import render as render_template
from chat.steering import preview, render
from store.attributes import COMPLEXITY_INSTRUCTIONS, LEVEL_WORDS, VERBOSITY_INSTRUCTIONS, Attributes, instructions

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


def test_instruct_appends_the_instructions_to_the_last_user_message():
    attrs = Attributes(verbosity=0, complexity=4)
    msgs, kwarg = render(MESSAGES, attrs, "instruct")
    assert kwarg is None
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]  # no system message added
    assert msgs[-1]["content"] == "More please.\n\n" + instructions(attrs)
    assert VERBOSITY_INSTRUCTIONS[0] in msgs[-1]["content"] and COMPLEXITY_INSTRUCTIONS[4] in msgs[-1]["content"]
    assert [m["content"] for m in msgs[:-1]] == [m["content"] for m in MESSAGES[:-1]]  # earlier turns as they were
    assert all("attributes" not in m for m in msgs)  # a general model's template never sees SteerLM keys
    assert "attributes" in MESSAGES[1] and MESSAGES[-1]["content"] == "More please."  # input untouched


def test_instruct_leaves_an_existing_system_message_alone():
    attrs = Attributes(verbosity=3)
    msgs, _ = render([{"role": "system", "content": "You are kind."}, *MESSAGES], attrs, "instruct")
    assert msgs[0] == {"role": "system", "content": "You are kind."}
    assert msgs[-1]["content"].endswith(instructions(attrs))


def test_instruct_without_a_final_user_message_uses_the_system_message():
    attrs = Attributes(verbosity=1)
    msgs, _ = render([{"role": "system", "content": "You are kind."}, *MESSAGES[:2]], attrs, "instruct")
    assert msgs[0]["content"] == "You are kind.\n\n" + instructions(attrs)
    assert msgs[-1]["content"] == "Keep a schedule."
    msgs, _ = render(MESSAGES[:2], attrs, "instruct")
    assert msgs[0] == {"role": "system", "content": instructions(attrs)} and len(msgs) == 3


def test_instruct_without_attributes_sends_the_conversation_as_it_is():
    msgs, kwarg = render(MESSAGES, None, "instruct")
    assert kwarg is None and [m["content"] for m in msgs] == [m["content"] for m in MESSAGES]


@pytest.mark.parametrize("level", range(5))
def test_every_level_renders_differently_and_agrees_with_the_preview(level):
    text = instructions(Attributes(verbosity=level, complexity=level))
    assert text == f"{VERBOSITY_INSTRUCTIONS[level]} {COMPLEXITY_INSTRUCTIONS[level]}"  # defaults add nothing
    # The UI preview's words are the ones the model is told.
    assert LEVEL_WORDS["verbosity"][level] in VERBOSITY_INSTRUCTIONS[level]
    assert LEVEL_WORDS["complexity"][level] in COMPLEXITY_INSTRUCTIONS[level]
    assert preview(Attributes(verbosity=level, complexity=1)) == f"{LEVEL_WORDS['verbosity'][level]} · plain language"
    assert len(set(VERBOSITY_INSTRUCTIONS)) == len(set(COMPLEXITY_INSTRUCTIONS)) == 5


def test_verbosity_instructions_give_rising_word_budgets():
    import re

    budgets = [int(re.search(r"(\d+) words", t).group(1)) for t in VERBOSITY_INSTRUCTIONS]
    assert budgets == sorted(budgets) and len(set(budgets)) == 5


def test_quality_attributes_are_mentioned_only_below_their_default():
    text = instructions(Attributes(helpfulness=1, correctness=4, coherence=2))
    assert f"Helpfulness: {LEVEL_WORDS['helpfulness'][1]}." in text
    assert f"Clarity: {LEVEL_WORDS['coherence'][2]}." in text and "Accuracy" not in text


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="steering mode"):
        render(MESSAGES, Attributes(), "telepathy")


def test_steering_mode_is_parsed_once_and_reads_as_its_name(tmp_path):
    from deploy.settings import SettingsError, load_settings
    from store.attributes import SteeringMode

    assert SteeringMode("instruct") is SteeringMode.INSTRUCT and SteeringMode.STEERLM == "steerlm"
    with pytest.raises(ValueError, match="unknown steering mode 'telepathy'; use one of steerlm, instruct"):
        SteeringMode("telepathy")

    def mode(**env: str) -> SteeringMode:
        return load_settings(environ={"ADVISOR_DATA_DIR": str(tmp_path), **env}).steering_mode

    assert mode(ADVISOR_BACKEND__STEERING="steerlm", ADVISOR_BACKEND__KIND="openai") is SteeringMode.STEERLM
    assert mode(ADVISOR_BACKEND__KIND="builtin") is SteeringMode.STEERLM  # auto
    assert mode(ADVISOR_BACKEND__KIND="openai") is SteeringMode.INSTRUCT  # auto
    with pytest.raises(SettingsError, match=r"backend\.steering.*'steerlm' or 'instruct'"):
        mode(ADVISOR_BACKEND__STEERING="telepathy")
