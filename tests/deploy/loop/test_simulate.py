"""The simulator: by default its users speak in real people's words from the gold set's test split
(not the extractor's own cues); its round-1 templates are what the fast extractor understands; it
drives the real service (one anonymous user per simulated user), and service errors end up in the
summary, not a crash."""

from __future__ import annotations

import json

import pytest
from service_helpers import ADMIN_TOKEN, down_settings, live, start_service  # noqa: F401  (fixture)
from store_peek import peek
from typer.testing import CliRunner

from deploy.cli.simulate import parse_rates
from deploy.loop.reactions import (
    CLARIFICATIONS,
    CORRECTIONS,
    NEXT_QUESTION_PREFIX,
    REPHRASE_PREFIX,
    THANKS,
    load_real_reactions,
    phrasebook,
)
from deploy.loop.simulate import (
    Preference,
    ReactionRates,
    SimulationConfig,
    SimulationError,
    load_questions,
    simulate,
)
from deploy.wiring import build_cli
from feedback.extract import FastExtractor, Window
from store.taxonomy import (
    ASK_CLARIFICATION,
    AWARE_WITH_CORRECTION,
    AWARE_WITHOUT_CORRECTION,
    POSITIVE,
    REPEAT_REPHRASE,
)

ANSWER = ("Go to bed and get up at the same time every day. Avoid screens for an hour before bed, keep the "
          "bedroom dark and cool, and if you are still awake after twenty minutes get up and read something calm.")


def _categories(messages: list[str], previous: str) -> list[set[str]]:
    result = FastExtractor().extract([Window(i, m, ANSWER, previous) for i, m in enumerate(messages)])
    return [{s.category for s in spans} for spans in result.spans]


# Round 1's templates the shipped classifier (960 train + dev conversations) misreads: the second
# sentence, which says what is needed, scores positive 0.31 against correction 0.27.
TEMPLATE_MISREADS: dict[str, set[str]] = {}  # none since the classifier of 2026-12-03


def test_every_reaction_template_is_understood_by_the_fast_extractor():
    q = load_questions()[0]
    cases = [(t, {POSITIVE}) for t in THANKS]
    cases += [(f"{t} {NEXT_QUESTION_PREFIX}{load_questions()[5].text}", {POSITIVE}) for t in THANKS]
    cases += [(t, {AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION}) for kind in CORRECTIONS.values() for t in kind]
    cases += [(REPHRASE_PREFIX + r, {REPEAT_REPHRASE}) for r in q.rephrases]
    cases += [(t, {ASK_CLARIFICATION}) for t in CLARIFICATIONS]
    found = _categories([c[0] for c in cases], q.text)
    for (text, allowed), cats in zip(cases, found):
        if text in TEMPLATE_MISREADS:  # pinned: a model that reads it right must drop it from the list
            assert cats == TEMPLATE_MISREADS[text], f"{text!r} is now read as {cats}: update TEMPLATE_MISREADS"
            continue
        if allowed == {AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION}:
            # An objection followed by the request again in a concrete form ("That's too vague. Give
            # me numbered steps...") may also be read as objection + re-ask (ANNOTATION.md, case 7).
            assert cats & allowed and cats <= allowed | {REPEAT_REPHRASE}, f"{text!r} was read as {cats or 'nothing'}"
            continue
        assert cats and cats <= allowed, f"{text!r} was read as {cats or 'nothing'}, expected one of {allowed}"


def test_real_reactions_are_annotated_test_split_feedback_the_extractor_was_not_fitted_on():
    from feedback.extract import load_gold
    from feedback.extract.train_classifier import REAL_GOLD
    from store.taxonomy import CATEGORY_IDS

    kind_of = {"thanks": {POSITIVE}, "complaint": {AWARE_WITHOUT_CORRECTION}, "clarify": {ASK_CLARIFICATION},
               "reask": {REPEAT_REPHRASE}}
    test = {c.id: c for c in load_gold(REAL_GOLD, split="test")}
    fitted = {f.span.strip().lower() for split in ("train", "dev") for c in load_gold(REAL_GOLD, split=split)
              for f in c.feedback}
    rows = load_real_reactions()
    assert len(rows) >= 20
    for row in rows:
        conv = test[row["source"]]  # a test-split conversation (a KeyError otherwise)
        assert any(f.span == row["text"] and f.category == row["category"] for f in conv.feedback), row
        assert row["category"] in CATEGORY_IDS and row["category"] in kind_of[row["kind"]], row
        assert row["also_in_training"] == (row["text"].strip().lower() in fitted)
    # Only five stock phrases are also said in a conversation the classifier was fitted on: they are everybody's.
    assert [r["text"] for r in rows if r["also_in_training"]] == ["Thanks!", "Thank you.", "That makes sense.",
                                                             "That's a good idea.", "Do you have any suggestions?"]
    for prefer in ("short", "long", "steps"):
        says = phrasebook("real", prefer)
        assert says.thanks and says.complaints and says.clarifications and says.reasks
        assert not says.rephrase_prefix and not says.next_question_prefix  # real users announce neither
    assert not any("lengthy" in t for t in phrasebook("real", "long").complaints)


def test_shipped_questions_have_rephrases_and_are_not_the_held_out_prompts():
    from chat.builtin.check import HELD_OUT_QUESTIONS

    questions = load_questions()
    assert len(questions) >= 20 and all(len(q.rephrases) >= 1 for q in questions)
    assert not {q.text for q in questions} & set(HELD_OUT_QUESTIONS)


def test_preferences_judge_and_rank():
    short, long_, steps = Preference("short", length_words=5), Preference("long", length_words=5), Preference("steps")
    brief, wordy, listed = "Sleep at ten.", "Sleep at ten every night and wake at six.", "Try this:\n- one\n- two"
    assert short.fits(brief) and not short.fits(wordy)
    assert long_.fits(wordy) and not long_.fits(brief)
    assert steps.fits(listed) and not steps.fits(wordy)
    assert short.score(brief) > short.score(wordy) and long_.score(wordy) > long_.score(brief)
    with pytest.raises(SimulationError, match="unknown preference"):
        Preference("polite")


def test_a_relative_taste_follows_the_slider():
    """Long users relative to the slider: nine words are too few at verbosity 4 (the model usually
    writes 12 there) and plenty at 0 (usually 3); without a position, the one threshold."""
    long_ = Preference("long", length_words=7, length_by_verbosity=(3, 5, 7, 10, 12))
    nine = "Sleep at ten every night and wake at six."
    assert long_.fits(nine, 0) and not long_.fits(nine, 4) and long_.fits(nine)
    assert not Preference("short", length_words=7, length_by_verbosity=(3, 5, 7, 10, 12)).fits(nine, 2)
    with pytest.raises(SimulationError, match="one threshold per verbosity"):
        Preference("long", length_by_verbosity=(3, 5))


def test_simulated_users_drive_the_service_and_extraction_finds_their_feedback(live):  # noqa: F811
    users_before = {r[0] for r in peek(live.store, "SELECT DISTINCT user_id FROM conversations")}
    # The tiny random model writes up to 12 tokens of gibberish: a 6-word threshold splits them.
    # The templates: this checks the pipeline, where the extractor's reading is known.
    config = SimulationConfig(url=live.url, users=3, turns=5, preference=Preference("short", length_words=6),
                              seed=1, admin_token=ADMIN_TOKEN, extract=True, phrasing="templates")
    summary = simulate(config)
    assert summary.errors == {} and summary.users == 3
    assert 15 <= summary.turns <= 18  # a closing thank-you may add one per user
    assert summary.judged > 0 and sum(summary.reactions.values()) >= summary.judged
    assert summary.extraction is not None and summary.extraction["status"] == "succeeded"

    users = {r[0] for r in peek(live.store, "SELECT DISTINCT user_id FROM conversations")} - users_before
    assert len(users) == 3  # one anonymous user (cookie jar) per simulated user
    n_ratings = peek(live.store, "SELECT count(*) FROM ratings WHERE user_id IN (SELECT unnest($u))",
                                 {"u": list(users)})[0][0]
    assert n_ratings == summary.reactions["like"] + summary.reactions["dislike"]
    categories = {r[0] for r in peek(live.store,
        "SELECT DISTINCT f.category FROM feedback_events f JOIN conversations c ON c.id = f.conversation_id "
        "WHERE c.user_id IN (SELECT unnest($u))", {"u": list(users)})}
    if summary.reactions["thanks"]:
        assert POSITIVE in categories
    if summary.reactions["correct"]:
        assert categories & {AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION}


def test_regenerating_users_keep_the_sibling_their_preference_ranks_first(live):  # noqa: F811
    rates = ReactionRates(correct=0, rephrase=0, regenerate=1, clarify=0, dislike=0, max_follow_ups=1)
    pref = Preference("long", length_words=1000)  # nothing fits: every answer is regenerated once
    summary = simulate(SimulationConfig(url=live.url, users=1, turns=4, preference=pref, rates=rates, seed=2))
    assert summary.reactions["regenerate"] == summary.reactions["choose"] >= 1
    rows = peek(live.store,
        "SELECT s.parent_id, s.message_id FROM sibling_choices s ORDER BY s.created_at DESC LIMIT $n",
        {"n": summary.reactions["choose"]})
    for parent_id, chosen in rows:
        siblings = peek(live.store, "SELECT id, content FROM messages WHERE parent_id = $p AND role = 'assistant'",
                                    {"p": parent_id})
        assert len(siblings) == 2
        best = max(siblings, key=lambda s: pref.score(s[1]))
        assert pref.score(dict(siblings)[chosen]) == pref.score(best[1])


def test_service_errors_are_counted_not_raised(tmp_path):
    service = start_service(down_settings(tmp_path))
    try:
        summary = simulate(SimulationConfig(url=service.url, users=2, turns=2, seed=0))
    finally:
        service.stop()
    assert summary.turns == 0 and sum(summary.errors.values()) == 4
    assert all(k.startswith("http_5") for k in summary.errors) and summary.error_samples


def test_unreachable_service_is_a_clear_error():
    with pytest.raises(SimulationError, match="cannot reach the advisor service at http://127.0.0.1:9"):
        simulate(SimulationConfig(url="http://127.0.0.1:9", timeout_s=2))


def test_cli_prints_a_json_summary(live, tmp_path):  # noqa: F811
    result = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path), "simulate", "--url", live.url,
                                              "--users", "1", "--turns", "2", "--prefer", "steps", "--verbosity", "1", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["users"] == 1 and summary["turns"] >= 2 and summary["errors"] == {}


@pytest.mark.parametrize("items, expected", [
    ([], ReactionRates()),
    (["regenerate=0.6", "clarify=0"], ReactionRates(regenerate=0.6, clarify=0.0)),
    (["dislike-too=1"], ReactionRates(dislike_too=1.0)),
])
def test_rate_options_change_only_the_weights_named(items, expected):
    assert parse_rates(items) == expected


@pytest.mark.parametrize("item", ["regenerate", "regenerate=lots", "regenerate=1.5", "max_follow_ups=1", "sulk=0.2"])
def test_a_bad_rate_option_says_what_is_allowed(item):
    with pytest.raises(SimulationError, match="expected NAME=P"):
        parse_rates([item])
