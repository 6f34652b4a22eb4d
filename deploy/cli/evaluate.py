"""`advisor eval ...`: the evaluator's metrics from the command line.

    advisor eval hh --data DIR [--model PATH] [--adapter PATH] [--scorer loglik|implicit|reward]
                    [--limit N] [--seed S] [--json]
    advisor eval judges --pairs FILE [--kind trained|fallback|llm] [--url URL --model NAME] [--json]
    advisor eval moderator [--data FILE] [--threshold P] [--json]
    advisor eval harmlessness [--model PATH] [--adapter PATH] [--prompts FILE] [--json]
    advisor eval helpfulness train [--data FILE] [--out DIR] [--list-size K] [--json]
    advisor eval helpfulness score [--model PATH] [--adapter PATH] [--reward-model DIR] [--data FILE] [--json]

Design choices:
- This module parses and prints. `deploy.release.offline` runs each evaluation;
  `deploy.release.models` finds and loads the model (default: the built-in one of the root
  `--data-dir`, built on first use; for `eval hh` the live release when the store has one);
  `deploy.release.judges` keeps the trained moderator and reward model under `<data_dir>/models/`.
- `--json` prints exactly one line of JSON on stdout; progress and notes go to stderr, so the
  output can be piped into `jq` or stored by the gate.
- The scorer defaults to `implicit` when an adapter is given (a DPO/KTO policy is scored by its
  log-ratio against its own base) and `loglik` otherwise.
- `eval hh` batches for this machine (`BatchConfig.for_this_machine`: one batch per core, bf16
  where the CPU computes it natively, every accuracy within 0.001 of float32; timings in
  docs/results.md). `--no-bf16` forces float32; the JSON says which ran.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from deploy.cli.common import settings_of
from deploy.release.judges import held_out_threads, reward_model_dir, train_reward_model
from deploy.release.models import SCORERS, live_release_model, use_threads
from deploy.release.offline import (
    harmlessness_of,
    helpfulness_of,
    hh_accuracy,
    judges_accuracy,
    moderator_accuracy,
)
from deploy.release.registry import ReleaseError

err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _quiet() -> None:
    # Weight-loading progress bars (transformers, sentence-transformers) would bury the result.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


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
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Batches scored at once, sharing torch's "
                                          "threads (default: one per CPU core; 1 = torch's own threading)."),
    bf16: Optional[bool] = typer.Option(None, "--bf16/--no-bf16", help="bfloat16 autocast (default: on when "
                                        "the CPU computes bf16 natively; ~1.5x faster, accuracies within 0.001)."),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
) -> None:
    """HH-RLHF preference accuracy: per subset, helpful (3 files pooled), harmless, and their mean."""
    _quiet()
    from evaluator.logprobs import BatchConfig

    settings = settings_of(ctx)
    if model is None and adapter is None and scorer != "reward":
        model, adapter = live_release_model(settings, err.print) or (None, None)
    scorer = scorer or ("implicit" if adapter else "loglik")
    if scorer not in SCORERS:
        raise _fail(f"--scorer must be one of {', '.join(SCORERS)}, got {scorer!r}")
    if scorer == "reward" and (adapter is not None or model is None):
        raise _fail("--scorer reward needs --model pointing at a sequence classifier (reward model), and no --adapter")
    if scorer == "implicit" and adapter is None:
        raise _fail("--scorer implicit needs --adapter: the reference is the same model with the adapter disabled")
    hh_dir = data or (Path(settings.gate.hh_data) if settings.gate.hh_data else None)
    if hh_dir is None:
        raise _fail("no HH-RLHF data: pass --data DIR (e.g. ../shared/data/hh-rlhf) or set gate.hh_data")
    use_threads(threads)
    batch = BatchConfig.for_this_machine(max_length=max_length, bf16=bf16, workers=workers)
    try:
        report, seconds = hh_accuracy(settings, hh_dir, scorer=scorer, model=model, adapter=adapter, beta=beta,
                                      batch=batch, limit=limit, seed=seed, say=err.print, busy=err.status)
    except (FileNotFoundError, ReleaseError) as exc:
        raise _fail(str(exc)) from None
    n_pairs = report.extra["pairs"]
    lines = [f"{name:28s} {_pct(r.accuracy):>7s}  ({r.correct}/{r.pairs}; ties {r.ties}, equal rows {r.equal}, "
             f"differ earlier {r.differ_earlier}, malformed {r.malformed})" for name, r in report.subsets.items()]
    lines += [f"{'helpful (3 files pooled)':28s} {_pct(report.helpful):>7s}",
              f"{'harmless':28s} {_pct(report.harmless):>7s}",
              f"{'mean':28s} {_pct(report.mean):>7s}",
              f"{n_pairs:,} pairs in {seconds:.0f} s ({n_pairs / seconds:.1f} pairs/s) on {platform.machine()}"]
    _emit(report.as_dict(), as_json, lines)


# ---------------------------------------------------------------- moderator / harmlessness


def moderator(
    ctx: typer.Context,
    data: Optional[Path] = typer.Option(None, "--data", help="Labelled JSON lines {text, label: safe|unsafe} "
                                        "(default: the shipped safety_advice.jsonl)."),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="Unsafe if p >= threshold."),
    show_errors: int = typer.Option(0, "--show-errors", min=0, help="Print up to N misclassified examples."),
    as_json: bool = typer.Option(False, "--json", help="Print one line of JSON."),
) -> None:
    """Train the offline moderator (cached) and report its held-out precision and recall."""
    _quiet()
    report = moderator_accuracy(settings_of(ctx), data, threshold=threshold, busy=err.status)
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
) -> None:
    """Share of the model's answers to risky prompts that the moderator judges safe."""
    _quiet()
    use_threads(threads)
    try:
        result = harmlessness_of(settings_of(ctx), model=model, adapter=adapter, prompts=prompts, threshold=threshold,
                                 max_new_tokens=max_new_tokens, say=err.print, busy=err.status)
    except ReleaseError as exc:
        raise _fail(str(exc)) from None
    lines = [f"harmlessness {_pct(result.score)} ({result.answers - result.unsafe}/{result.answers} judged safe)"]
    lines += [f"  unsafe ({f['p_unsafe']:.2f}): {f['prompt']} -> {f['answer'][:120]}" for f in result.flagged]
    _emit({"harmlessness": result.score, "answers": result.answers, "unsafe": result.unsafe,
           "flagged": result.flagged}, as_json, lines)


# ---------------------------------------------------------------- helpfulness (+ diversity)


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
) -> None:
    """Train the Plackett–Luce reward model; report NDCG@2/3/5 and 1st-vs-2nd / 1st-vs-last on held-out threads."""
    _quiet()
    train, test = held_out_threads(data, test_size, seed)
    target = out or reward_model_dir(settings_of(ctx).data_path)
    with err.status(f"Training on {len(train)} threads…"):
        report, result = train_reward_model(train, test, target, epochs=epochs, list_size=list_size, seed=seed)
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
) -> None:
    """Helpfulness (share of human answers the model's advice beats) plus Self-BLEU and max-BLEU."""
    _quiet()
    use_threads(threads)
    try:
        out = helpfulness_of(settings_of(ctx), reward_model or reward_model_dir(settings_of(ctx).data_path),
                             model=model, adapter=adapter, data=data, limit=limit, max_new_tokens=max_new_tokens,
                             say=err.print, busy=err.status)
    except (FileNotFoundError, ReleaseError) as exc:
        raise _fail(str(exc)) from None
    sb = "n/a" if out["self_bleu"] is None else f"{out['self_bleu']:.1f}"
    _emit(out, as_json, [f"helpfulness {_pct(out['helpfulness'])} over {out['questions']} questions",
                         f"self-BLEU {sb}   max-BLEU vs references {out['max_bleu']:.1f}"])


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
    _quiet()
    try:
        result, seconds = judges_accuracy(settings_of(ctx), pairs, kind=kind, llm_url=url, llm_model=model,
                                          busy=err.status)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        raise _fail(str(exc)) from exc
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
