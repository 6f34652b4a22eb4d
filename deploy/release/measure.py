"""Measure one side of a gate run (the candidate or the live release) item by item.

`deploy.release.evaluate` loads each side's model (the base with its adapter merged in) and calls
`measure_side` with it; this module answers the prompts and scores every item, keeping the
per-item values so the two sides can be paired (`paired_intervals`).

Design choices:
- Same base, same prompts, same decoding: each side is the base model with its adapter merged
  into the weights (the bare base for a live release without one; merged, a decoding step costs
  what the base's does: 0.75x the time with PEFT's adapter at every layer, on this CPU); greedy
  answers with the same token budget, but for the model-alone harmlessness axis: several sampled
  answers a risky prompt, seeded alike on both sides (`risky_answer_sets`), because one answer
  each left an equal candidate's interval as wide as the tolerance (docs/release.md).
- HH accuracy is scored the same way on both sides: the mean log-likelihood per answer token of
  the chosen and the rejected answer under the side's own model. The implicit reward
  (log π − log π_ref) would measure only what a policy *changed* against its reference and is
  identically 0 for the bare base (every pair a tie), so a candidate compared with a base live
  release would face a meaningless 0; and a candidate that continues from live's adapter has a
  different reference from live's. The log-likelihood is defined for any model, needs one pass
  per side, and its per-token mean keeps the length of an answer from deciding.
- Answers are rendered as the chat renders them (`chat.steering.render`): the steering reaches
  the model where it does in the served chat (the SteerLM template line, or instructions after
  the user's question), so the steerability axis measures what users get.
- Per-item values: helpfulness per advice prompt (the answer's reward as a percentile of human
  reference answers, `evaluator.helpfulness.helpfulness_on_prompts`; with each answer's word
  count, for the difference at equal length that the decision reports), harmlessness per risky
  prompt (the share of its answers judged safe: 1 or 0 for one greedy answer), Self-BLEU per answer (against the other answers of its side, 0-1;
  quadratic, about 20 s a side for 243 answers, but per-answer values vary so widely that 50
  answers gave a ±0.12 interval for equal sides),
  HH per pair (1 correct), steerability per grid row (ρ is computed over the resampled prompts).
- Harmlessness twice: the model alone (`harmlessness`), and as served (`served_harmlessness`):
  the risky prompts answered under the safety policy (`guard.system_prompt`, first in the system
  message, as `chat.turns` puts it) and passed through the serving guard's own checks
  (`chat.guard.served_answers`: refused requests are not generated, unsafe answers become the
  refusal), then judged like the model's. With the guard off and no policy they are the same
  answers, and the details say so.
- The live side's answers, HH scores and judges' scores come through its `AnswerCache` when it has
  one (a live release): a second gate against the same release generates and judges only the
  candidate's answers.
- Generation, the HH pass and the judges' reads run `gate.streams` batches side by side, sharing
  torch's threads (`evaluator.streams`; the steering grid's cells side by side): on 2 cores, one
  thread each, as many as one batch on torch's own threads, in 0.86-0.92x the time. The
  HH pass runs under bfloat16 autocast where the CPU computes it natively (0.44x the float32
  time, 1-2 of 400 outcomes moved). Both sides' weights are cast to `gate.dtype` once they are
  merged: bfloat16 where the CPU computes it natively ("auto"). Autocast was slower for generation
  (it casts every weight again at each decoding step); weights cast once halve what each step
  reads from memory (docs/release.md). One dtype for both sides, named in every cache key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from deploy.release.gate import AXES

Progress = Callable[[str], None]


def weights_dtype(settings: Any) -> str:
    """The dtype both sides' weights are cast to (`gate.dtype`; "auto": bfloat16 where the CPU
    computes it natively, `evaluator.logprobs.native_bf16`)."""
    from evaluator.logprobs import native_bf16

    dtype = settings.gate.dtype
    return ("bfloat16" if native_bf16() else "float32") if dtype == "auto" else dtype


def weights_key(settings: Any) -> str:
    """In the answer and HH cache keys: how a side's weights were made. Merged weights round
    differently from PEFT's per-layer product, bfloat16 from float32, and one flipped token changes
    a sampled draw after it. ("merged" alone is float32, the key earlier gates cached under.)"""
    dtype = weights_dtype(settings)
    return "merged" if dtype == "float32" else f"merged-{dtype}"


@dataclass
class Side:
    name: str  # "candidate" or "live"
    cache: Any = None  # deploy.release.answer_cache.AnswerCache of this side's release, or None


@dataclass
class Inputs:
    """What both sides are measured on."""

    settings: Any
    prompts: list[str]  # advice requests (helpfulness, self-BLEU)
    risky: list[str]
    helpful_judge: Any  # deploy.release.judges.load_judges
    scale: Any  # evaluator.helpfulness.ReferenceScale: the helpfulness judge's scores of human answers
    harmless_judge: Any
    hh_subsets: dict | None
    steer_prompts: list[str]
    say: Progress
    guard: Any = None  # chat.guard.Guard as served (None: switched off)
    policy: str = ""  # the safety policy put first in the system message ('' = none)


@dataclass
class SideScores:
    metrics: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(AXES))
    items: dict[str, list] = field(default_factory=dict)  # axis -> per-item values (steer: rows)
    hh_groups: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def _answer_fn(model: Any, tokenizer: Any, settings: Any, attributes: Any = None, *, policy: str = "",
               cache: Any = None, seed: int | None = None, batch_size: int | None = None,
               max_new_tokens: int | None = None, streams: int | None = None):
    """Answers to questions rendered as a chat turn renders them: the safety `policy` first in the
    system message, then the steering (`chat.turns`); through `cache` when given. Greedy and
    `max_new_tokens` (default `gate.max_new_tokens`) long, or with a `seed` sampled as the service
    samples (`backend.*`, its token budget unless `max_new_tokens` is given), each batch from its
    own generator (`evaluator.generation.hf_answer_fn`). Batches run in `streams` (default
    `gate.streams`)."""
    from chat.guard import with_policy
    from chat.steering import render
    from evaluator.generation import hf_answer_fn
    from evaluator.sampling import NAME as SAMPLER
    from evaluator.streams import threads_per_batch
    from store.attributes import Attributes

    attributes = attributes or Attributes()  # what a chat answer gets when nobody moves a slider
    mode = settings.steering_mode

    def to_messages(question: str) -> list[dict]:
        return render(with_policy([{"role": "user", "content": question}], policy), attributes, mode)[0]

    steerlm = render([], attributes, mode)[1]  # the template line, the same for every question
    kwargs = {"attributes": steerlm} if steerlm is not None else None
    b, sampled = settings.backend, seed is not None
    tokens = max_new_tokens or (b.max_new_tokens if sampled else settings.gate.max_new_tokens)
    sampling = {"temperature": b.temperature, "top_p": b.top_p} if sampled else None
    batch_size = batch_size or settings.gate.batch_size
    # An answer depends on its batch: a sampled one on which random numbers its row gets, a greedy
    # one in bfloat16 on the padding (41 of 64 the same text at 16 and 32 a batch; docs/release.md).
    decoding = {**sampling, "sampler": SAMPLER, "seed": seed, "rng": "per-batch"} if sampled else "greedy"
    # And on its threads: one thread a batch rounds bfloat16 otherwise than two (bench/gate_streams.py).
    streams = settings.gate.streams if streams is None else streams
    generation = {"max_new_tokens": tokens, "decoding": decoding, "weights": weights_key(settings),
                  "batch": batch_size, "threads": threads_per_batch(streams)}
    answer = hf_answer_fn(model, tokenizer, max_new_tokens=tokens, batch_size=batch_size, template_kwargs=kwargs,
                          to_messages=to_messages, sampling=sampling, seed=seed, streams=streams)
    if cache is None:
        return answer
    return cache.wrap(answer, lambda q: {"messages": to_messages(q), "template": kwargs}, generation)


def served_answer_fn(model: Any, tokenizer: Any, settings: Any, *, policy: str, seed: int, batch_size: int = 16,
                     streams: int = 1):
    """`answer(questions) -> answers` as the service draws them at the default sliders: under
    `policy` (the guard's system prompt, or "" for the model alone), sampled with `seed` (each
    batch from its own generator), `backend.max_new_tokens` long, in `streams`."""
    return _answer_fn(model, tokenizer, settings, policy=policy, seed=seed, batch_size=batch_size, streams=streams)


def measure_side(model: Any, tokenizer: Any, side: Side, inp: Inputs) -> SideScores:
    from evaluator.diversity import self_bleu_scores
    from evaluator.helpfulness import helpfulness_on_prompts
    from evaluator.text import words

    out = SideScores()
    inp, cached_judges = _judged_through_cache(inp, side.cache) if side.cache is not None else (inp, [])
    answer = _answer_fn(model, tokenizer, inp.settings, cache=side.cache)
    inp.say(f"{side.name}: answering {len(inp.prompts)} advice requests")
    advice = answer(inp.prompts)
    draws = inp.settings.gate.harmlessness_draws
    inp.say(f"{side.name}: answering {len(inp.risky)} risky prompts"
            + (f", {draws} sampled answers each" if draws > 1 else ""))
    risky_sets = risky_answer_sets(model, tokenizer, inp.settings, inp.risky, cache=side.cache)
    inp.say(f"{side.name}: judging the answers")
    help_result = helpfulness_on_prompts(inp.helpful_judge, inp.scale, inp.prompts, advice)
    out.metrics["helpfulness"], out.items["helpfulness"] = help_result.score, list(help_result.per_question)
    out.items["advice_words"] = [words(a) for a in advice]  # for the length-controlled difference
    out.items["advice_answers"] = advice  # for the judge's validity checks
    bleu = [b / 100.0 for b in self_bleu_scores(advice)]
    out.metrics["self_bleu"], out.items["self_bleu"] = sum(bleu) / len(bleu), bleu
    harm, shares = safe_shares(inp.risky, risky_sets, inp.harmless_judge)
    out.metrics["harmlessness"] = sum(shares) / len(shares)
    out.items["harmlessness"] = shares
    out.details.update(questions=len(inp.prompts), risky_prompts=len(inp.risky), unsafe=harm.unsafe,
                       risky_answers=harm.answers,
                       flagged=[{**f, "answer": f["answer"][:300]} for f in harm.flagged[:10]],
                       sample_answer=advice[0][:300] if advice else "")
    _served(model, tokenizer, side, inp, out, risky_sets[0])
    if inp.hh_subsets is not None:
        _hh(model, tokenizer, side, inp, out)
    if inp.steer_prompts:
        _steer(model, tokenizer, side, inp, out)
    if side.cache is not None:
        out.details["cached_judge_scores"] = {"reused": sum(j.reused for j in cached_judges),
                                              "scored": sum(j.scored for j in cached_judges)}
    return out


# Draw d of the risky answers is seeded with DRAW_SEED + d on every side (each batch from its own
# generator): one model on the same prompts, batch size, streams and machine draws the same answers (an
# interval of [0, 0]), and a changed model starts from live's random numbers. A live side cached
# under another prompt set breaks that (its batches held other prompts), not the interval.
DRAW_SEED = 20261206


def risky_answer_sets(model: Any, tokenizer: Any, settings: Any, prompts: list[str], *,
                      cache: Any = None, seed: int = DRAW_SEED) -> list[list[str]]:
    """The model's own answers to the risky prompts, one list per draw: one greedy answer each when
    `gate.harmlessness_draws` is 1, else that many answers each, sampled as the service samples
    (`backend.temperature`, `backend.top_p`) with the gate's token budget (`gate.max_new_tokens`),
    draw d seeded with `seed` + d (in the cache key)."""
    gs = settings.gate
    if gs.harmlessness_draws == 1:
        return [_answer_fn(model, tokenizer, settings, cache=cache)(prompts)]
    return [_answer_fn(model, tokenizer, settings, cache=cache, seed=seed + d, max_new_tokens=gs.max_new_tokens)(prompts)
            for d in range(gs.harmlessness_draws)]


def safe_shares(prompts: list[str], answer_sets: list[list[str]], judge: Any) -> tuple[Any, list[float]]:
    """The harmlessness judge over every answer of every draw (`evaluator.moderation.harmlessness`),
    and per prompt the share of its answers judged safe: the gate's per-item value."""
    from evaluator.moderation import harmlessness

    harm = harmlessness([p for _ in answer_sets for p in prompts], [a for s in answer_sets for a in s], judge)
    flagged = {(f["prompt"], f["answer"]) for f in harm.flagged}
    shares = [sum((p, s[i]) not in flagged for s in answer_sets) / len(answer_sets) for i, p in enumerate(prompts)]
    return harm, shares


def _judged_through_cache(inp: Inputs, cache: Any) -> tuple[Inputs, list]:
    """`inp` with its judges (the guard's too) scoring through `cache`, and those cached judges
    (one per judge: the guard's is the harmlessness judge): a judge that already scored this
    release's answer in an earlier gate is not run on it again."""
    wrapped: dict[int, Any] = {}

    def through(judge: Any) -> Any:
        if id(judge) not in wrapped:
            wrapped[id(judge)] = cache.judge(judge)
        return wrapped[id(judge)]

    guard = replace(inp.guard, judge=through(inp.guard.judge)) if inp.guard is not None else None
    inp = replace(inp, helpful_judge=through(inp.helpful_judge), harmless_judge=through(inp.harmless_judge),
                  guard=guard)
    return inp, list(wrapped.values())


def _served(model: Any, tokenizer: Any, side: Side, inp: Inputs, out: SideScores, risky_answers: list[str]) -> None:
    """Harmlessness of what users get from this side: its answers under the safety policy, through
    the serving guard (refusals in place of what it stops), judged like the model's own."""
    from chat.guard import REFUSED, REPLACED, served_answers
    from evaluator.moderation import harmlessness

    if inp.guard is None and not inp.policy:
        out.metrics["served_harmlessness"] = out.metrics["harmlessness"]
        out.items["served_harmlessness"] = list(out.items["harmlessness"])
        out.details["served"] = {"same_as_model": True}
        return
    if inp.policy:
        generate = _answer_fn(model, tokenizer, inp.settings, policy=inp.policy, cache=side.cache)
    else:  # the guard alone: the model's own answers, judged as they stream
        by_prompt = dict(zip(inp.risky, risky_answers))
        generate = lambda questions: [by_prompt[q] for q in questions]
    inp.say(f"{side.name}: {len(inp.risky)} risky prompts as served"
            f"{' (safety policy)' if inp.policy else ''}{' (guard)' if inp.guard is not None else ''}")
    if inp.guard is None:
        shown, verdicts = generate(inp.risky), []
    else:
        pairs = served_answers(inp.guard, inp.risky, generate)
        shown, verdicts = [text for text, _ in pairs], [v["verdict"] for _, v in pairs]
    harm = harmlessness(inp.risky, shown, inp.harmless_judge)
    flagged = {f["prompt"] for f in harm.flagged}
    out.metrics["served_harmlessness"] = harm.score
    out.items["served_harmlessness"] = [0.0 if p in flagged else 1.0 for p in inp.risky]
    out.details["served"] = {"same_as_model": False, "policy": bool(inp.policy), "guard": inp.guard is not None,
                             "refused": verdicts.count(REFUSED), "replaced": verdicts.count(REPLACED),
                             "unsafe": harm.unsafe,
                             "flagged": [{**f, "answer": f["answer"][:300]} for f in harm.flagged[:10]]}


def _hh(model: Any, tokenizer: Any, side: Side, inp: Inputs, out: SideScores) -> None:
    from evaluator.hh import evaluate_hh_pairs
    from evaluator.logprobs import BatchConfig
    from evaluator.scoring import LogLikelihoodScorer

    n = sum(len(s.pairs) for s in inp.hh_subsets.values())
    inp.say(f"{side.name}: HH accuracy on {n} pairs (mean log-likelihood per answer token)")
    # bfloat16 where native, `gate.streams` batches at a time (module docstring); the key holds `bf16`.
    batch = BatchConfig.for_this_machine(workers=inp.settings.gate.streams)
    scorer = LogLikelihoodScorer(model, tokenizer, batch, mean=True)
    if side.cache is not None:  # the live release's scores of these pairs, from its last gate
        scorer = side.cache.scorer(scorer, {"scorer": "loglik_mean", "weights": weights_key(inp.settings),
                                            "max_length": batch.max_length, "bf16": batch.bf16,
                                            "share_prompts": batch.share_prompts})
    report, outcomes, groups = evaluate_hh_pairs(inp.hh_subsets, scorer)
    out.metrics["hh_accuracy"] = report.mean
    out.items["hh_accuracy"] = [1.0 if ok else 0.0 for ok in outcomes]
    out.hh_groups = groups
    out.details["hh"] = {"scorer": "loglik_mean", "pairs": n, "helpful": report.helpful, "harmless": report.harmless,
                         **{name: r.accuracy for name, r in report.subsets.items()}}
    if side.cache is not None:
        out.details["hh"]["cached_scores"] = {"reused": scorer.reused, "scored": scorer.scored}


def steer_grid(model: Any, tokenizer: Any, settings: Any, prompts: list[str], cache: Any = None) -> list:
    """The gate's steering grid (`evaluator.steerability.answer_grid`): greedy answers of the model
    alone at each of `gate.steer_values` for verbosity and for complexity, the other at its default."""
    from evaluator.steerability import answer_grid
    from store.attributes import Attributes

    gs = settings.gate

    def answer(questions: list[str], attribute: str, value: int) -> list[str]:
        # Length is what verbosity is measured by, so its answers get room to be long; complexity
        # is read per sentence and word, which the gate's usual cap already shows.
        tokens = gs.steer_max_new_tokens if attribute == "verbosity" else None
        # One batch per cell: a cell's answers run to about the same length, so a second batch of
        # a few prompts would cost nearly as many decoding steps as the first.
        return _answer_fn(model, tokenizer, settings, Attributes(**{attribute: value}), cache=cache,
                          max_new_tokens=tokens, batch_size=max(gs.batch_size, len(questions)), streams=1)(questions)

    return answer_grid(answer, prompts, list(gs.steer_values), streams=gs.streams)  # cells side by side


def _steer(model: Any, tokenizer: Any, side: Side, inp: Inputs, out: SideScores) -> None:
    from evaluator.steerability import level_means, score

    gs = inp.settings.gate
    inp.say(f"{side.name}: steering grid, {len(inp.steer_prompts)} prompts × {len(gs.steer_values)} values × 2 "
            f"sliders (verbosity answers up to {gs.steer_max_new_tokens} tokens)")
    rows = steer_grid(model, tokenizer, inp.settings, inp.steer_prompts, cache=side.cache)
    summary = score(rows)
    out.metrics["steerability"] = summary["score"]
    out.items["steerability"] = rows
    out.details["steerability"] = {**summary, "mean_words_by_verbosity": level_means(rows, "verbosity")}


def paired_intervals(cand: SideScores, live: SideScores, settings: Any) -> dict[str, dict]:
    """Each axis measured on both sides: its 95 % paired bootstrap interval of candidate − live."""
    from evaluator.paired import (
        length_controlled_statistic,
        mean_of_strata_statistic,
        mean_statistic,
        paired_bootstrap,
    )
    from evaluator.steerability import steer_statistic

    gs = settings.gate
    out: dict[str, dict] = {}
    for axis in AXES:
        c, v = cand.items.get(axis), live.items.get(axis)
        if not c or not v:
            continue
        strata = None
        if axis == "steerability":
            n, stat = steer_statistic(c, v)
        elif axis == "hh_accuracy":
            n, stat, strata = len(c), mean_of_strata_statistic(c, v, cand.hh_groups), cand.hh_groups
        else:
            n, stat = len(c), mean_statistic(c, v)
        out[axis] = paired_bootstrap(n, stat, strata=strata, n_boot=gs.bootstrap, seed=gs.seed).as_dict()
    words = cand.items.get("advice_words"), live.items.get("advice_words")
    if "helpfulness" in out and all(words):
        # Reported, not judged: how much of a helpfulness change is the reward model paying for
        # length (evaluator.paired.length_controlled_statistic). An operator whose users asked
        # for shorter answers reads this before forcing or rejecting.
        lc = paired_bootstrap(len(words[0]), length_controlled_statistic(cand.items["helpfulness"],
                              live.items["helpfulness"], *words), n_boot=gs.bootstrap, seed=gs.seed)
        out["helpfulness"]["at_equal_length"] = {"diff": lc.diff, "low": lc.low, "high": lc.high,
                                                 "words": [sum(w) / len(w) for w in words]}
    return out
