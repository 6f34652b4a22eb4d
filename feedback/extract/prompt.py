"""The LLM extractor's prompt: Don-Yahiya et al.'s (2024) own, over whole conversations.

Source: the prompt the authors released with their extraction code (github.com/shachardon/
naturally_occurring_feedback, `prompt_prefix/improved_guidelines_with_format_json`, which their
`extract_feedback.py` prepends to a conversation). Of the repository's variants (plain-text or JSON
answers, with a confidence level, one-shot) it is the JSON one with neither extra; the paper's
appendix itself could not be consulted when this was written, so which variant it prints is not
confirmed. `PAPER_PROMPT` is that file's text unchanged, typos and all (its "[Insert ...]"
placeholders too), and the conversation is rendered as their script renders it: one line per turn,
`# user: ...` / `# assistant: ...`, every turn of the conversation, appended after the prompt. They
wrapped it in Mixtral's `[INST] ... [/INST]`; here it is one user message, and the backend's chat
template does the wrapping for whichever model serves it.

The answer format is the paper's: one JSON object per feedback,
`{"User Response Pattern": "<category name or URn>", "User Response Text": "<the user's words>"}`,
and `{"User Response Pattern": "No Feedback", "User Response Text": ""}` when there is none
(`parse.py` reads it, and this project's own `{"category", "span"}` items too).

Design choices:
- Unchanged wording on purpose: the point is to measure the paper's extractor on this project's
  gold set, not a prompt tuned to it. What the project knows beyond the paper (a new request is
  not feedback, text about feedback is not feedback, a span must be the user's own words) is
  enforced after the model answers (`llm.py`), where it cannot be argued with.
- User text is untrusted. A line inside a message that would read as a new turn (`# assistant:`)
  is defused (its `#` becomes a full-width `＃`), so a user cannot forge turns; anything else they
  write can at worst make the model quote their own words, which validation then checks.
- Long conversations are cut to fit small context windows: every message is capped, then the
  oldest turns before the first turn to annotate are dropped (the request and answer right before
  it always stay), so the instructions at the top are never the part that is cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PAPER_PROMPT = """There are five different patterns in user responses subsequent to errors in assistant utterances:
Repeat or Rephrase (UR1) - The user repeats or rephrases their concern, e.g., Actually, I wanted ...
Make Aware with Correction (UR2) - The user makes the system aware of the error and provides information to address what is missing or wrong in its utterance, e.g., No. I wanted you to ...
Make Aware without Correction (UR3) - The user makes the system aware of the error without providing additional information, e.g., You\u2019re wrong.
Ask for Clarification (UR4) - The user asks for clarification, e.g., Are you sure? Is it really that ...
Positive Feedback (UR5) - The user confirms that the assistant did a good job by directly saying so or thanking it, e.g., Thank you

Given these guidelines, please recognize such user responses in the following dialogue. Please use the format:
{
"User Response Pattern": [Insert User Response Pattern],
"User Response Text": [Insert User Response Text]
}

If there is no feedback, use the following format:
{
"User Response Pattern": "No Feedback",
"User Response Text": ""
}

"""
PROMPT_SOURCE = "shachardon/naturally_occurring_feedback: prompt_prefix/improved_guidelines_with_format_json"
# The paper's abbreviations, in the taxonomy's order (store.taxonomy.CATEGORY_IDS).
UR_CODES = {"ur1": "repeat_rephrase", "ur2": "aware_with_correction", "ur3": "aware_without_correction",
            "ur4": "ask_clarification", "ur5": "positive"}

_ROLES = {"user": "user", "assistant": "assistant"}
_FORGED_TURN = re.compile(r"(^|\n)([ \t]*)#(?=[ \t]*(?:user|assistant|system|human)\b)", re.IGNORECASE)
MAX_MESSAGE_CHARS = 2000  # an earlier turn: enough to show what it said
MAX_TARGET_CHARS = 4000  # a turn to annotate: its spans must be findable
MAX_PROMPT_CHARS = 16000  # about 4k tokens: SmolLM2's 8k context keeps room for the answer


def _defuse(text: str, limit: int) -> str:
    text = _FORGED_TURN.sub(lambda m: m.group(1) + m.group(2) + "\uff03", text)
    return text if len(text) <= limit else text[:limit] + " [...]"


def render_conversation(messages: Sequence[tuple[str, str]]) -> str:
    """The authors' rendering: `# user: ...` / `# assistant: ...`, one per turn, each ending in a newline."""
    return "".join(f"# {_ROLES.get(role, role)}: {content}\n" for role, content in messages)


def fit(messages: Sequence[tuple[str, str]], targets: Sequence[int], *, max_message_chars: int = MAX_MESSAGE_CHARS,
        max_prompt_chars: int = MAX_PROMPT_CHARS) -> list[tuple[str, str]]:
    """The messages capped and defused; the oldest dropped while the rendering is too long, but
    never a target nor the two messages before the first one (the request and its answer)."""
    wanted = set(targets)
    capped = [(role, _defuse(content, MAX_TARGET_CHARS if k in wanted else max_message_chars))
              for k, (role, content) in enumerate(messages)]
    keep_from = max(0, min(wanted, default=0) - 2)
    start = 0
    total = len(PAPER_PROMPT) + sum(len(c) + len(r) + 4 for r, c in capped)
    while total > max_prompt_chars and start < keep_from:
        total -= len(capped[start][1]) + len(capped[start][0]) + 4
        start += 1
    return capped[start:]


def build_messages(messages: Sequence[tuple[str, str]], targets: Sequence[int] = (), *,
                   max_message_chars: int = MAX_MESSAGE_CHARS, max_prompt_chars: int = MAX_PROMPT_CHARS) -> list[dict]:
    """The chat messages for one conversation (one user message: the paper's prompt, then the
    conversation), ready for any backend's `complete`. `targets`: indices of the user turns whose
    feedback is wanted (they are never cut); default: the last message."""
    targets = list(targets) or [len(messages) - 1]
    shown = fit(messages, targets, max_message_chars=max_message_chars, max_prompt_chars=max_prompt_chars)
    return [{"role": "user", "content": PAPER_PROMPT + render_conversation(shown)}]
