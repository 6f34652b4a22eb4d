"""`advisor eval ...`: the evaluator's metrics from the command line.

    advisor eval hh --data DIR [--model PATH] [--adapter PATH] [--scorer loglik|implicit|reward]
                    [--limit N] [--seed S] [--json]
    advisor eval judges --pairs FILE [--kind trained|fallback|llm] [--url URL --model NAME] [--json]
    advisor eval moderator [--data FILE] [--threshold P] [--json]
    advisor eval harmlessness [--model PATH] [--adapter PATH] [--prompts FILE] [--json]
    advisor eval helpfulness train [--data FILE] [--out DIR] [--list-size K] [--json]
    advisor eval helpfulness score [--model PATH] [--adapter PATH] [--reward-model DIR] [--data FILE] [--json]

Design choices:
- The model defaults to the built-in one under `--data-dir` (built on first use, as `advisor
  ask` does); `eval hh` defaults to the live release (its adapter on its base model) when the
  store has one, else the built-in model.
- `--json` prints exactly one line of JSON on stdout; progress and notes go to stderr, so the
  output can be piped into `jq` or stored by the gate.
- The scorer defaults to `implicit` when an adapter is given (a DPO/KTO policy is scored by its
  log-ratio against its own base) and `loglik` otherwise.
- Speed on a small CPU box (`eval hh`): one batch per core in threads of one torch thread each,
  and bfloat16 autocast where the CPU has bf16 instructions, which agrees with float32 on every
  accuracy to 0.001 (timings: docs/results.md). `--no-bf16` forces float32; the JSON says which ran.
- Trained artefacts (the moderator, the Plackett–Luce reward model) are cached under
  `<data_dir>/models/`, keyed by what they were trained on.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from deploy.cli.common import settings_of

err = Console(stderr=True)

SCORERS = ("loglik", "implicit", "reward")


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _quiet() -> None:
    # Weight-loading progress bars (transformers, sentence-transformers) would bury the result.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _data_dir(ctx: typer.Context, data_dir: Path | None) -> Path:
    return data_dir.expanduser().resolve() if data_dir else settings_of(ctx).data_path


def _default_model(data_dir: Path) -> Path:
    from chat.builtin.build import build_builtin_model, builtin_model_path, is_built

    path = builtin_model_path(data_dir)
    if not is_built(path):
        err.print("Building the built-in model first (cached in the data directory; minutes on a CPU)…")
        path = build_builtin_model(data_dir)
    return path


def _live_release_model(ctx: typer.Context, data_dir: Path | None) -> tuple[Path, Path | None] | None:
    """(base model, adapter) of the live release, or None when there is none to use (no live
    release, its files are gone, or a running service holds the database)."""
    from store import Store, StoreError

    settings = settings_of(ctx)  # the configured store (PostgreSQL included); --data-dir names a DuckDB file's home
    target = _data_dir(ctx, data_dir) / "advisor.duckdb" if data_dir and not settings.store.url else settings.store_target
    if isinstance(target, Path) and not target.exists():
        return None
    try:
        with Store(target, **settings.store_options) as store:
            live = store.releases.live_release()
    except StoreError as exc:
        err.print(f"Cannot read the live release ({exc}); using the built-in model. Pass --model/--adapter to choose.")
        return None
    if live is None or not Path(live.base_model).exists():
        return None
    if live.adapter_path and not (Path(live.adapter_path) / "adapter_config.json").is_file():
        err.print(f"The live release {live.id}'s adapter {live.adapter_path} is missing; using the built-in model.")
        return None
    err.print(f"Scoring the live release {live.id}.")
    return Path(live.base_model), Path(live.adapter_path) if live.adapter_path else None


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def _default_workers() -> int:
    import os

    import torch

    # On a GPU one stream of batches is right; on a CPU one batch per core (see evaluator.scoring._map).
    return 1 if torch.cuda.is_available() else max(1, min(os.cpu_count() or 1, 8))


def _native_bf16() -> bool:
    """bf16 autocast pays off only where the CPU has bf16 instructions (AVX512-BF16, AMX)."""
    import torch

    if torch.cuda.is_available():
        return False
    cpu = torch.cpu
    return any(getattr(cpu, f, lambda: False)() for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def load_causal_lm(model_path: Path, adapter: Path | None) -> tuple[Any, Any]:
    """(model, tokenizer) from a directory, with a PEFT adapter on top when given."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(model_path).exists():
        raise _fail(f"no model at {model_path}; pass --model with a Hugging Face model directory")
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path))
    if adapter is not None:
        from peft import PeftModel

        if not (Path(adapter) / "adapter_config.json").is_file():
            raise _fail(f"{adapter} is not a PEFT adapter directory (no adapter_config.json)")
        model = PeftModel.from_pretrained(model, str(adapter))
    return model.eval(), tokenizer


def _emit(result: dict, as_json: bool, lines: list[str]) -> None:
    if as_json:
        typer.echo(json.dumps(result, separators=(",", ":")))
    else:
        for line in lines:
            typer.echo(line)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


# ---------------------------------------------------------------- hh


def hh(
    ctx: typer.Context,
    data: Optional[Path] = typer.Option(None, "--data", help="HH-RLHF directory with <subset>/test.jsonl(.gz) "
                                        "(default: the gate.hh_data setting)."),
    model: Optional[Path] = typer.Option(None, "--model", help="Model directory (default: the live release, "
                                         "else the built-in model)."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="PEFT adapter directory on top of --model."),
    scorer: Optional[str] = typer.Option(None, "--scorer", help="loglik | implicit | reward "
                                         "(default: implicit with --adapter, else loglik)."),
    beta: float = typer.Option(0.1, "--beta", help="β of the implicit reward (scales scores; accuracy unchanged)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Sample N rows per subset (fixed seed)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the --limit sample."),
    max_length: int = typer.Option(1024, "--max-length", min=2, help="Most tokens one answer sees (prompt cut from the left)."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Batches scored at once, one torch thread "
                                          "each (default: one per CPU core; 1 = torch's own threading)."),
    bf16: Optional[bool] = typer.Option(None, "--bf16/--no-bf16", help="bfloat16 autocast (default: on when "
                                        "the CPU computes bf16 natively; ~1.5x faster, accuracies within 0.001)."),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """HH-RLHF preference accuracy: per subset, helpful (3 files pooled), harmless, and their mean."""
    _quiet()
    from evaluator.hh import evaluate_hh
    from evaluator.hh_data import load_hh
    from evaluator.logprobs import BatchConfig
    from evaluator.scoring import ImplicitRewardScorer, LogLikelihoodScorer, RewardModelScorer

    if model is None and adapter is None and scorer != "reward":
        model, adapter = _live_release_model(ctx, data_dir) or (None, None)
    scorer = scorer or ("implicit" if adapter else "loglik")
    if scorer not in SCORERS:
        raise _fail(f"--scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    if scorer == "reward" and (adapter is not None or model is None):
        raise _fail("--scorer reward needs --model pointing at a sequence classifier (reward model), and no --adapter")
    if scorer == "implicit" and adapter is None:
        raise _fail("--scorer implicit needs --adapter: the reference is the same model with the adapter disabled")
    hh_dir = data or (Path(settings_of(ctx).gate.hh_data) if settings_of(ctx).gate.hh_data else None)
    if hh_dir is None:
        raise _fail("no HH-RLHF data: pass --data DIR (e.g. ../shared/data/hh-rlhf) or set gate.hh_data")
    try:
        subsets = load_hh(hh_dir, limit=limit, seed=seed)
    except FileNotFoundError as e:
        raise _fail(str(e)) from None
    _set_threads(threads)
    model_path = model or _default_model(_data_dir(ctx, data_dir))
    bf16 = _native_bf16() if bf16 is None else bf16
    batch = BatchConfig(max_length=max_length, bf16=bf16, workers=workers or _default_workers())
    if scorer == "reward":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        scoring = RewardModelScorer(AutoModelForSequenceClassification.from_pretrained(str(model_path)), tokenizer, batch)
    else:
        lm, tokenizer = load_causal_lm(model_path, adapter)
        scoring = (ImplicitRewardScorer(lm, tokenizer, beta=beta, batch=batch) if scorer == "implicit"
                   else LogLikelihoodScorer(lm, tokenizer, batch))
    n_pairs = sum(len(s.pairs) for s in subsets.values())
    t0 = time.perf_counter()
    with err.status(f"Scoring {n_pairs:,} pairs with the {scorer} scorer…"):
        report = evaluate_hh(subsets, scoring)
    seconds = time.perf_counter() - t0
    report.extra = {"scorer": scorer, "model": str(model_path), "adapter": str(adapter) if adapter else None,
                    "pairs": n_pairs, "seconds": round(seconds, 1), "pairs_per_second": round(n_pairs / seconds, 2),
                    "limit": limit, "seed": seed, "truncated": scoring.stats.truncated, "bf16": bf16,
                    "workers": batch.workers}
    lines = [f"{name:28s} {_pct(r.accuracy):>7s}  ({r.correct}/{r.pairs}; ties {r.ties}, equal rows {r.equal}, "
             f"differ earlier {r.differ_earlier}, malformed {r.malformed})" for name, r in report.subsets.items()]
    lines += [f"{'helpful (3 files pooled)':28s} {_pct(report.helpful):>7s}",
              f"{'harmless':28s} {_pct(report.harmless):>7s}",
              f"{'mean':28s} {_pct(report.mean):>7s}",
              f"{n_pairs:,} pairs in {seconds:.0f} s ({n_pairs / seconds:.1f} pairs/s) on {platform.machine()}"]
    _emit(report.as_dict(), as_json, lines)


# ---------------------------------------------------------------- moderator / harmlessness


def _moderator(ctx: typer.Context, data_dir: Path | None, data: Path | None):
    from deploy.release.judges import load_moderator, moderator_dir
    from evaluator.moderation import load_safety_examples

    examples = load_safety_examples(data) if data else load_safety_examples()
    return load_moderator(moderator_dir(_data_dir(ctx, data_dir)), examples), examples


def moderator(
    ctx: typer.Context,
    data: Optional[Path] = typer.Option(None, "--data", help="Labelled JSON lines {text, label: safe|unsafe} "
                                        "(default: the shipped safety_advice.jsonl)."),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="Unsafe if p >= threshold."),
    show_errors: int = typer.Option(0, "--show-errors", min=0, help="Print up to N misclassified examples."),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Train the offline moderator (cached) and report its held-out precision and recall."""
    _quiet()
    from evaluator.moderation import held_out_report

    with err.status("Training the moderator and measuring it on held-out folds…"):
        mod, examples = _moderator(ctx, data_dir, data)
        report = held_out_report(examples, embedder=mod.embedder, threshold=threshold)
    lines = [f"precision {report.precision:.3f}  recall {report.recall:.3f}  f1 {report.f1:.3f}  "
             f"accuracy {report.accuracy:.3f}",
             f"{report.examples} examples ({report.unsafe} unsafe), {report.folds}-fold held-out predictions, "
             f"threshold {threshold}"]
    for text in report.false_positives[:show_errors]:
        lines.append(f"  false positive: {text}")
    for text in report.false_negatives[:show_errors]:
        lines.append(f"  false negative: {text}")
    _emit(report.summary(), as_json, lines)


def harmlessness_cmd(
    ctx: typer.Context,
    model: Optional[Path] = typer.Option(None, "--model", help="Model directory (default: the built-in model)."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="PEFT adapter directory on top of --model."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSON lines {prompt} (default: the shipped risky prompts)."),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="Unsafe if p >= threshold."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Share of the model's answers to risky prompts that the moderator judges safe."""
    _quiet()
    from evaluator.generation import hf_answer_fn
    from evaluator.moderation import load_risky_prompts, model_harmlessness

    _set_threads(threads)
    questions = load_risky_prompts(prompts) if prompts else load_risky_prompts()
    lm, tokenizer = load_causal_lm(model or _default_model(_data_dir(ctx, data_dir)), adapter)
    with err.status(f"Answering {len(questions)} risky prompts and judging the answers…"):
        mod, _ = _moderator(ctx, data_dir, None)
        result = model_harmlessness(hf_answer_fn(lm, tokenizer, max_new_tokens=max_new_tokens), mod, questions,
                                    threshold=threshold)
    lines = [f"harmlessness {_pct(result.score)} ({result.answers - result.unsafe}/{result.answers} judged safe)"]
    lines += [f"  unsafe ({f['p_unsafe']:.2f}): {f['prompt']} -> {f['answer'][:120]}" for f in result.flagged]
    _emit({"harmlessness": result.score, "answers": result.answers, "unsafe": result.unsafe,
           "flagged": result.flagged}, as_json, lines)


# ---------------------------------------------------------------- helpfulness (+ diversity)


def _reward_model_dir(ctx: typer.Context, data_dir: Path | None) -> Path:
    from deploy.release.judges import reward_model_dir

    return reward_model_dir(_data_dir(ctx, data_dir))


def helpfulness_train(
    ctx: typer.Context,
    data: Optional[Path] = typer.Option(None, "--data", help="Ranked-answer JSON lines {question, answers: [{text, votes}]} "
                                        "(default: the shipped ranked_advice.jsonl)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to save the reward model (default: <data_dir>/models/pl-reward)."),
    list_size: Optional[int] = typer.Option(None, "--list-size", min=2, help="K answers per Plackett–Luce list (default: all)."),
    epochs: int = typer.Option(60, "--epochs", min=1),
    test_size: float = typer.Option(0.2, "--test-size", min=0.05, max=0.9, help="Share of threads held out."),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Train the Plackett–Luce reward model; report NDCG@2/3/5 and 1st-vs-2nd / 1st-vs-last on held-out threads."""
    _quiet()
    from evaluator.helpfulness import (
        PLConfig,
        load_threads,
        ranking_report,
        split_threads,
        train_embedding_reward_model,
    )

    threads = load_threads(data) if data else load_threads()
    train, test = split_threads(threads, test_size, seed)
    with err.status(f"Training on {len(train)} threads…"):
        model, history = train_embedding_reward_model(train, config=PLConfig(epochs=epochs, list_size=list_size, seed=seed))
        report = ranking_report(model, test)
    target = out or _reward_model_dir(ctx, data_dir)
    model.save(target)
    result = {**report.as_dict(), "train_threads": len(train), "final_loss": history.losses[-1], "saved": str(target)}
    ndcg = "  ".join(f"NDCG{k} {v:.3f}" for k, v in result["ndcg"].items())
    lines = [f"held-out threads: {report.threads}   {ndcg}",
             f"1st-vs-2nd {_pct(report.first_vs_second)}   1st-vs-last {_pct(report.first_vs_last)}",
             f"saved to {target}"]
    _emit(result, as_json, lines)


def helpfulness_score(
    ctx: typer.Context,
    model: Optional[Path] = typer.Option(None, "--model", help="Model directory (default: the built-in model)."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="PEFT adapter directory on top of --model."),
    reward_model: Optional[Path] = typer.Option(None, "--reward-model", help="Saved reward model "
                                                "(default: <data_dir>/models/pl-reward; train it with `helpfulness train`)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Ranked-answer JSON lines (default: the shipped set)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="First N threads only."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Helpfulness (share of human answers the model's advice beats) plus Self-BLEU and max-BLEU."""
    _quiet()
    from evaluator.diversity import max_bleu, self_bleu
    from evaluator.generation import hf_answer_fn
    from evaluator.helpfulness import EmbeddingRewardModel, helpfulness, load_threads

    rm_dir = reward_model or _reward_model_dir(ctx, data_dir)
    if not (rm_dir / EmbeddingRewardModel.META).is_file():
        raise _fail(f"no reward model at {rm_dir}; run `advisor eval helpfulness train` first")
    rm = EmbeddingRewardModel.load(rm_dir)
    items = load_threads(data) if data else load_threads()
    items = items[:limit] if limit else items
    _set_threads(threads)
    lm, tokenizer = load_causal_lm(model or _default_model(_data_dir(ctx, data_dir)), adapter)
    with err.status(f"Answering {len(items)} questions…"):
        advice = hf_answer_fn(lm, tokenizer, max_new_tokens=max_new_tokens)([t.question for t in items])
        result = helpfulness(rm, items, advice)
    diversity = {"self_bleu": self_bleu(advice) if len(advice) > 1 else None,
                 "max_bleu": max_bleu(advice, [t.texts for t in items])}
    out = {"helpfulness": result.score, "questions": result.questions, **diversity}
    sb = "n/a" if diversity["self_bleu"] is None else f"{diversity['self_bleu']:.1f}"
    _emit(out, as_json, [f"helpfulness {_pct(result.score)} over {result.questions} questions",
                         f"self-BLEU {sb}   max-BLEU vs references {diversity['max_bleu']:.1f}"])


# ---------------------------------------------------------------- judges


def judges_cmd(
    ctx: typer.Context,
    pairs: Path = typer.Option(..., "--pairs", exists=True, dir_okay=False,
                               help='JSON lines {"prompt", "chosen", "rejected", "axis": "helpful"|"harmless"}; '
                                    "the prompt is the dialogue so far in HH-RLHF's \\n\\nHuman: … form."),
    kind: Optional[str] = typer.Option(None, "--kind", help="trained | fallback | llm (default: the judges.kind setting)."),
    url: Optional[str] = typer.Option(None, "--url", help="OpenAI-compatible base URL for --kind llm (judges.llm_url)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model name for --kind llm (judges.llm_model)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one line of JSON (the last line)."),
) -> None:
    """Check a judge on preference pairs: per axis, how often it scores the chosen answer higher."""
    import dataclasses

    _quiet()
    from deploy.release.judges import load_judges
    from evaluator.judges.check import check_judges, read_pairs

    settings = settings_of(ctx)
    js = settings.judges
    try:
        js = dataclasses.replace(js, kind=kind or js.kind, llm_url=url or js.llm_url, llm_model=model or js.llm_model)
        rows = read_pairs(pairs)
        if not rows:
            raise ValueError(f"{pairs} holds no pairs")
        helpful, harmless = load_judges(dataclasses.replace(settings, judges=js))
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        raise _fail(str(exc)) from exc
    t0 = time.time()
    with err.status(f"Scoring {sum(map(len, rows.values()))} pairs with the {js.kind} judges…"):
        result = check_judges({"helpful": helpful, "harmless": harmless}, rows)
    seconds = time.time() - t0
    lines = [f"{axis}: accuracy {r['accuracy']:.3f} [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}] over "
             f"{r['pairs']} pairs ({r['judge']})" for axis, r in result.items()]
    err.print(f"{sum(r['pairs'] for r in result.values()) / max(seconds, 1e-9):.2f} pairs/s", highlight=False)
    if not as_json:
        for line in lines:
            typer.echo(line)
    typer.echo(json.dumps(result, separators=(",", ":")))


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Evaluate models: HH preference accuracy, helpfulness, harmlessness, diversity.",
                        no_args_is_help=True)
    group.command("hh")(hh)
    group.command("moderator")(moderator)
    group.command("harmlessness")(harmlessness_cmd)
    group.command("judges")(judges_cmd)
    helpful = typer.Typer(help="Helpfulness: train the Plackett–Luce reward model, score a model with it.",
                          no_args_is_help=True)
    helpful.command("train")(helpfulness_train)
    helpful.command("score")(helpfulness_score)
    group.add_typer(helpful, name="helpfulness")
    app.add_typer(group, name="eval")
