"""`advisor extract`: mine natural feedback from the store once, or evaluate an extractor on a gold file.

    advisor extract [--extractor fast|llm|both] [--chunk-size N] [--json]
    advisor extract --url http://HOST:PORT          (ask the running service to do it)
    advisor extract eval [--gold FILE] [--split dev|test|all] [--extractor ...] [--url URL --model NAME]
                         [--reranker DIR] [--json]
    advisor extract build-reranker [--out DIR]      (the fast extractor's slower cross-encoder tier)
    advisor extract reviews export --out FILE | precision   (operators' reviews: `deploy.cli.reviews`)

Design choices:
- The LLM kinds get a completion function made here, in the composition root: greedy decoding, no
  attributes, on the extraction model (`extraction.url`, or `eval --url/--model`: any
  OpenAI-compatible server, a batch going out as concurrent requests) or else the configured
  serving backend (`deploy.serving.factory.make_backend`). `feedback` never sees a backend object.
- A run from the CLI takes the same path as the service's scheduled job (`run_extraction`, a
  `jobs` row, the watermark); only the lock is private to this process, which is enough because
  DuckDB keeps any other process off the file while we hold it. When the service holds the file,
  `--url` asks it to run its extraction job instead. On a shared PostgreSQL store the CLI may run
  beside the replicas' scheduled extraction: the watermark's compare-and-set lets only one of
  them commit each chunk.
- `eval --json` prints exactly one JSON object (the metrics of `feedback.extract.evaluate`, plus
  `extractor`, `split` and the extractor's drop counts), so scripts can parse stdout.
"""

from __future__ import annotations

import json
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli import reviews
from deploy.cli.common import settings_of
from deploy.settings import Settings

err = Console(stderr=True)



class ExtractorKind(str, Enum):
    fast = "fast"
    llm = "llm"
    both = "both"


class Split(str, Enum):
    train = "train"
    dev = "dev"
    test = "test"
    all = "all"


def completion_function(settings: Settings, *, url: str | None = None, model: str | None = None,
                        batch_size: int | None = None):
    """`complete(batch_of_message_lists) -> list[str]` on the extraction model (greedy): the
    OpenAI-compatible server at `url` / `extraction.url`, else the configured serving backend."""
    from deploy.serving.factory import extraction_backend, greedy_completion, make_backend, model_needs_build

    backend = extraction_backend(settings, url=url, model=model, concurrency=batch_size)
    if backend is None:
        if model_needs_build(settings):
            err.print(f"Making the {settings.backend.kind} model first (once; it is cached in the data directory)...")
        backend = make_backend(settings)
    return greedy_completion(backend, settings.steering_mode, max_new_tokens=settings.extraction.max_new_tokens)


def _extractor(settings: Settings, kind: ExtractorKind, batch_size: int | None, *, url: str | None = None,
               model: str | None = None, reranker: Path | None = None):
    from deploy.serving.factory import extraction_reranker
    from deploy.settings import SettingsError
    from feedback.extract import make_extractor

    batch_size = batch_size or settings.extraction.batch_size
    complete = (completion_function(settings, url=url, model=model, batch_size=batch_size)
                if kind is not ExtractorKind.fast else None)
    try:  # the LLM alone has no use for it: not loaded then
        tier = extraction_reranker(settings, reranker) if kind is not ExtractorKind.llm else None
    except SettingsError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    return make_extractor(kind.value, complete=complete, batch_size=batch_size, reranker=tier)


RERANKER_HELP = ("A cross-encoder directory mixed into the fast extractor (default extraction.reranker; "
                 "`advisor extract build-reranker` makes one).")


def extract(
    ctx: typer.Context,
    extractor: ExtractorKind = typer.Option(ExtractorKind.fast, "--extractor", "-e", help="fast (no LLM), llm, or both."),
    chunk_size: int = typer.Option(2000, "--chunk-size", min=1, help="User messages per chunk (one transaction each)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1,
                                             help="Conversations per model call (llm, both; default extraction.batch_size)."),
    url: Optional[str] = typer.Option(None, "--url", help="Run it in the service that holds the database instead."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url (default: server.admin_token)."),
    reranker: Optional[Path] = typer.Option(None, "--reranker", help=RERANKER_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the job result as JSON."),
) -> None:
    """Mine natural feedback from messages newer than the last run (one run, recorded in jobs)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_of(ctx)
    if url:
        from deploy.cli.common import start_service_job

        start_service_job(url, token or settings.server.admin_token, "extract", {"extractor": extractor.value},
                          what="extraction", timeout=30)
        return
    from deploy.audit import audited, cli_actor
    from deploy.cli.common import open_store
    from feedback.extract import run_extraction

    ex = _extractor(settings, extractor, batch_size, reranker=reranker)
    with open_store(settings) as store:
        with err.status(f"extracting with {extractor.value}...") as status:
            def progress(r) -> None:
                status.update(f"extracting with {extractor.value}: {r.messages:,} messages, {r.new_events:,} events")

            with audited(store, cli_actor(), "extract", extractor.value, surface="cli") as entry:
                result = run_extraction(store, ex, lock=threading.Lock(), trigger="cli", chunk_size=chunk_size,
                                        progress=progress)
                entry.details.update(job_id=result.job_id, new_events=result.new_events)
    if as_json:
        print(json.dumps(result.as_dict(), default=str))
    else:
        table = Table("category", "new events")
        for category, n in result.per_category.items():
            table.add_row(category, f"{n:,}")
        Console().print(table)
        err.print(f"job {result.job_id}: {result.status} · {result.messages:,} messages "
                  f"({result.windows:,} after an answer) · {result.new_events:,} new events · "
                  f"watermark {result.watermark_from} → {result.watermark_to} · {result.duration_s:.1f}s")
        if result.dropped:
            err.print("dropped model items: " + ", ".join(f"{k} {v}" for k, v in result.dropped.items()))
        for e in result.errors[:5]:
            err.print(f"[yellow]{e}[/yellow]")
    if result.status == "failed":
        raise typer.Exit(1)


def evaluate_cmd(
    ctx: typer.Context,
    gold: Optional[Path] = typer.Option(None, "--gold", "-g", help="Gold JSON lines (default: the shipped dev set)."),
    split: Split = typer.Option(Split.all, "--split", help="Only conversations of this split (the shipped set: dev | test)."),
    extractor: ExtractorKind = typer.Option(ExtractorKind.fast, "--extractor", "-e"),
    batch_size: Optional[int] = typer.Option(
        None, "--batch-size", min=1, help="Conversations per model call; on a server, concurrent requests "
        "(default extraction.batch_size)."),
    url: Optional[str] = typer.Option(None, "--url", help="An OpenAI-compatible server for the LLM (e.g. vLLM: "
                                      "http://HOST:PORT/v1; default extraction.url, else the serving backend)."),
    model: Optional[str] = typer.Option(None, "--model", help="The model name at --url (default: the server's first)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N conversations (quick LLM checks)."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    reranker: Optional[Path] = typer.Option(None, "--reranker", help=RERANKER_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with the metrics."),
) -> None:
    """Span and category precision/recall (Don-Yahiya et al.) with bootstrap 95% intervals."""
    from feedback.extract import SHIPPED_GOLD, evaluate, load_gold, predict
    from feedback.extract.gold import GoldFormatError

    path = gold or SHIPPED_GOLD
    try:
        conversations = load_gold(path, split=split.value)
    except GoldFormatError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    if limit:
        conversations = conversations[:limit]
    ex = _extractor(settings_of(ctx), extractor, batch_size, url=url, model=model, reranker=reranker)
    started = time.perf_counter()
    predictions, run = predict(ex, conversations)
    seconds = time.perf_counter() - started
    metrics = evaluate(conversations, predictions, n_bootstrap=bootstrap, seed=seed)
    metrics.update({"extractor": extractor.value, "extractor_version": ex.version, "gold": str(path),
                    "split": split.value, "limit": limit,
                    "extractor_stats": dict(run.stats), "errors": run.errors[:20], "seconds": round(seconds, 2),
                    "conversations_per_s": round(len(conversations) / seconds, 3) if seconds > 0 else None})
    if as_json:
        print(json.dumps(metrics, default=str))
        return
    table = Table("metric", "value", "95% interval")
    for key in ("span_precision", "span_recall", "category_precision", "category_recall"):
        m = metrics[key]
        table.add_row(key.replace("_", " "), f"{m['value']:.3f}", f"{m['low']:.3f} – {m['high']:.3f}")
    console = Console()
    console.print(table)
    per = Table("category", "gold", "predicted", "precision", "recall")
    for category, c in metrics["per_category"].items():
        per.add_row(category, str(c["gold"]), str(c["predicted"]), f"{c['precision']:.3f}", f"{c['recall']:.3f}")
    console.print(per)
    labels = metrics["confusion"]["labels"]
    confusion = Table("gold \\ predicted", *[label[:12] for label in labels])
    for label, row in zip(labels, metrics["confusion"]["matrix"]):
        confusion.add_row(label, *[str(v) for v in row])
    console.print(confusion)
    err.print(f"{metrics['n_conversations']} conversations ({split.value} split of {path.name}), "
              f"{metrics['n_gold']} gold spans, {metrics['n_predicted']} predicted, extractor {extractor.value}, "
              f"{metrics['seconds']:.1f}s")


def build_reranker(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write it (default <data_dir>/models/feedback-reranker)."),
    holdout_dev: bool = typer.Option(False, "--holdout-dev", help="Leave the dev split out (to choose the mix on it)."),
) -> None:
    """Fine-tune the fast extractor's cross-encoder tier on the shipped gold set (slow: tens of minutes on a CPU)."""
    from feedback.extract.train_rerank import build

    settings = settings_of(ctx)
    out = out or settings.data_path / "models" / "feedback-reranker"
    meta = build(out, holdout_dev=holdout_dev, log=err.print)
    err.print(f"wrote {out} ({meta['sentences']:,} sentences, {meta['train_seconds']:.0f} s). Use it with "
              f"`advisor extract eval --reranker {out}`, or set extraction.reranker = \"{out}\" "
              f"(ADVISOR_EXTRACTION__RERANKER) for the service's extraction.")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Natural feedback: mine it from the logs, or evaluate an extractor.",
                        invoke_without_command=True)
    group.callback(invoke_without_command=True)(extract)
    group.command("eval")(evaluate_cmd)
    group.command("build-reranker")(build_reranker)
    reviews.register(group)
    app.add_typer(group, name="extract")
