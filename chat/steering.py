"""How steering attributes reach a model.

Two renderings (DESIGN.md, "Steering"):
- `steerlm`: the model was trained with attribute-conditioned SFT. The SteerLM string goes into
  the chat template's `attributes` kwarg, which puts it on the `<|attributes|>` line after the
  assistant header of the generation prompt (transformers: `apply_chat_template(...,
  attributes=s)`; vLLM: `chat_template_kwargs={"attributes": s}`). Earlier assistant turns keep
  the `attributes` key they were generated with, exactly as they look in training data.
- `instruct`: a general chat model that never saw SteerLM strings. The values become plain
  instructions appended to the *last user message*, as sent (stored messages are untouched; a
  system message the operator set stays as it was). No template kwarg, no extra keys.
  Where and how, measured with bench/steering.py on SmolLM2-135M-Instruct (10 dev prompts, greedy,
  300 new tokens), because a 135M model follows little:
  - The first wording, a five-line list of settings ("Length: one or two sentences (verbosity
    0/4)" …) in the system message, did nothing: Spearman rho(verbosity, words) -0.00, mean
    words at verbosity 4 over 0 0.97, 64 of 90 answers ran to the token limit.
  - One imperative sentence per attribute with a word budget ("Answer in one or two sentences,
    no more than 30 words." … "about 250 words, with numbered steps") moved it, but in the
    system message verbosity 0 still averaged 82 words (5 prompts); after the question, 32.
  - This rendering (below), after the question: rho 0.90 [95% CI 0.85, 0.95], 4/0 ratio 6.6
    [5.5, 7.9] (all ten verbosity-4 answers hit the 300-token limit, so that understates it),
    rho(complexity, Flesch-Kincaid grade) 0.67 [0.58, 0.79], grade 5.1 -> 11.2.
  So the instruction goes last, next to the request it governs. It is also per answer (the
  sliders can change between turns), which a system message over the whole conversation is not,
  and it survives the backend's trimming of long prompts, which keeps a prompt's end. Only the
  last user message carries it, so earlier turns never pile up old settings. A conversation that
  does not end with a user message gets it in the system message instead.
  Each sentence contains the level's `LEVEL_WORDS` phrase, so the UI preview and the model agree.
  The wording and the placement live in `feedback.attributes` (`instructions`,
  `with_instructions`), because the trainer must render a training prompt exactly as the model
  saw it when it answered, and `trainer` cannot import `chat`.
  Helpfulness, correctness and coherence are mentioned only below their default 4 (unmeasured:
  a general model has no sensible reading of "be less helpful", and every extra clause dilutes
  the two instructions people actually steer).

Pure functions on message dicts; no model or backend code here.
"""

from __future__ import annotations

from feedback.attributes import LEVEL_WORDS, STEERING_MODES, Attributes, with_instructions


def check_mode(mode: str) -> str:
    if mode not in STEERING_MODES:
        raise ValueError(f"unknown steering mode {mode!r}; use one of {', '.join(STEERING_MODES)}")
    return mode


def preview(attributes: Attributes) -> str:
    """One line saying what the verbosity and complexity levels mean ("brief · plain language")."""
    return f"{LEVEL_WORDS['verbosity'][attributes.verbosity]} · {LEVEL_WORDS['complexity'][attributes.complexity]}"


def render(
    messages: list[dict], attributes: Attributes | None, mode: str
) -> tuple[list[dict], str | None]:
    """Return (messages to send, value of the template kwarg `attributes` or None).

    Never mutates the input. With `attributes=None` nothing is steered (the model's default)."""
    check_mode(mode)
    if mode == "steerlm":
        out = [dict(m) for m in messages]
        return out, attributes.steerlm() if attributes is not None else None
    return with_instructions(messages, attributes), None
