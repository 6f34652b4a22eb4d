"""`advisor ask`: one chat turn from the command line, logged exactly as the web app logs it.

Design choices:
- Everything a user typed is validated before anything is opened or written: bad input exits
  with code 2 and a one-line message, and leaves the database untouched (not even created).
- The answer streams to stdout and nothing else goes there (unless `--json`), so
  `advisor ask ... > answer.txt` works; the conversation id, warnings and progress go to stderr.
- The turn runs through `chat.turns` with the live release applied, like the web app: same
  steering, same limits, same metadata, same safety guard and policy. A terminal cannot take back
  what it printed: an answer the guard withdraws mid-stream is followed by a line saying so and
  the refusal (the stored answer is the refusal alone); `--json` prints the stored answer and the
  guard's `safety` verdict.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from chat.backends import BackendError, SamplingParams
from chat.guard import Replace
from chat.threads import safety_dict
from chat.turns import send
from deploy.cli.common import settings_of
from deploy.serving.factory import make_backend, model_needs_build, sampling_params, turn_context, use_live_release
from deploy.serving.guard import make_guard, warm_up
from deploy.settings import Settings, SettingsError
from store import InvalidInput, NotFound, Store, StoreError, clean_text
from store.attributes import Attributes, InvalidAttributes

err = Console(stderr=True)

DEFAULT_CLI_USER = "cli"
_CONTROL = {chr(c) for c in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]}


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _check_question(question: str, settings: Settings) -> str:
    # The web app quietly drops control characters from what people type; on the command line they
    # are almost always a quoting accident, so say so instead of asking something else.
    bad = sorted({f"\\x{ord(c):02x}" for c in question if c in _CONTROL})
    if bad:
        raise InvalidInput(f"The question contains control characters ({', '.join(bad[:5])}); remove them and ask again.")
    return clean_text(question, what="question", max_chars=settings.server.max_message_chars)


def _backend_with_progress(settings: Settings):
    """Make the backend; building the built-in model first shows a progress bar (minutes)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars would clutter the answer's terminal
    if not model_needs_build(settings):
        with err.status("Loading the model…"):
            return make_backend(settings)
    if settings.backend.kind == "pretrained":
        with err.status("Fetching and converting SmolLM2-135M-Instruct (first run only, about a minute)…") as status:
            return make_backend(settings, say=lambda msg: status.update(msg))
    err.print("Building the built-in model (first run only; it is cached in the data directory)…")
    columns = (TextColumn("[bold]training"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
               TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("build", total=None, loss=float("nan"))

        def progress(step: int, total: int, loss: float) -> None:
            bar.update(task, completed=step, total=total, loss=loss)

        return make_backend(settings, progress=progress)


def ask(
    ctx: typer.Context,
    question: str = typer.Argument(..., help="Your question, or - to read it from stdin."),
    verbosity: Optional[str] = typer.Option(None, "--verbosity", "-v", metavar="0-4", help="Answer length, 0 (one or two sentences) to 4 (thorough)."),
    complexity: Optional[str] = typer.Option(None, "--complexity", "-x", metavar="0-4", help="Language, 0 (very simple) to 4 (expert)."),
    helpfulness: Optional[str] = typer.Option(None, "--helpfulness", metavar="0-4", help="How helpful (default 4)."),
    correctness: Optional[str] = typer.Option(None, "--correctness", metavar="0-4", help="How accurate (default 4)."),
    coherence: Optional[str] = typer.Option(None, "--coherence", metavar="0-4", help="How clear (default 4)."),
    user: str = typer.Option(DEFAULT_CLI_USER, "--user", "-u", help="User id the turn is logged under."),
    conversation: Optional[str] = typer.Option(None, "--conversation", help="Continue this conversation (id printed by an earlier ask)."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Longest answer, in tokens (default: backend.max_new_tokens)."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="0 = greedy (default: backend.temperature)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed, for reproducible answers."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (answer and metadata) instead of streaming."),
) -> None:
    """Ask one question: stream the answer to stdout and log the turn like the web app does."""
    settings = settings_of(ctx)
    # ---- validate everything first: bad input must not open, create or write anything
    try:
        raw = {"verbosity": verbosity, "complexity": complexity, "helpfulness": helpfulness,
               "correctness": correctness, "coherence": coherence}
        attributes = Attributes.from_dict({k: v for k, v in raw.items() if v is not None})
        params: SamplingParams = sampling_params(settings, max_new_tokens=max_new_tokens,
                                                 temperature=temperature, seed=seed)
        text = _check_question(sys.stdin.read() if question == "-" else question, settings)
        user_id = clean_text(user, what="user id", max_chars=200)
    except (InvalidAttributes, InvalidInput, ValueError) as exc:
        raise _fail(str(exc), 2) from None

    try:
        store = Store(settings.store_target, **settings.store_options)
    except StoreError as exc:
        raise _fail(str(exc), 1) from None
    with store:
        try:
            if conversation is not None:  # before the (slow) model load
                store.conversations.get(conversation, user_id=user_id)
            if store.users.is_forgotten(user_id):
                raise InvalidInput(f"User {user_id!r} asked to be forgotten; use another --user.")
            backend = _backend_with_progress(settings)
        except (NotFound, InvalidInput) as exc:
            raise _fail(str(exc), 2) from None
        except (BackendError, SettingsError) as exc:
            raise _fail(str(exc), 1) from None
        guard = make_guard(settings)
        try:
            with err.status("Loading the safety judge…"):
                warm_up(guard)
        except Exception as exc:  # e.g. the sentence encoder's package is missing
            raise _fail(f"The safety judge could not be loaded, so nothing was asked: {exc}", 1) from None
        try:
            release_id, warning = use_live_release(store, backend)
            if warning:
                err.print(f"[yellow]{warning}[/yellow]", highlight=False)
            tctx = turn_context(settings, store, backend, source="cli", release_id=release_id, guard=guard)
            turn = send(tctx, user_id=user_id, text=text, conversation_id=conversation,
                        attributes=attributes, params=params)
        except (NotFound, InvalidInput) as exc:
            raise _fail(str(exc), 2) from None
        except BackendError as exc:
            raise _fail(str(exc), 1) from None
        code = _stream(turn, as_json)
        backend.close()
    raise typer.Exit(code)


def _stream(turn, as_json: bool) -> int:
    """Print the answer; return the exit code. The turn logs itself however this ends."""
    try:
        for delta in turn:
            if as_json:
                continue
            if isinstance(delta, Replace):
                sys.stdout.write("\n")
                err.print("[yellow](the safety check withdrew the answer above)[/yellow]", highlight=False)
            sys.stdout.write(delta)
            sys.stdout.flush()
    except BackendError as exc:
        if not as_json:
            sys.stdout.write("\n")
        err.print(f"[red]Error:[/red] {exc}", highlight=False, soft_wrap=True)
        err.print(f"conversation: {turn.conversation_id}", highlight=False)
        return 1
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        err.print(f"(stopped) conversation: {turn.conversation_id}", highlight=False)
        return 130
    answer = turn.answer
    if as_json:
        g = answer.generation
        print(json.dumps({
            "conversation_id": turn.conversation_id,
            "question_id": turn.user_message.id,
            "answer_id": answer.id,
            "answer": answer.content,
            "status": answer.status,
            "finish_reason": g.finish_reason,
            "attributes": g.attributes.as_dict(),
            "steering": g.steering,
            "backend": g.backend,
            "model": g.model,
            "adapter": g.adapter,
            "release_id": g.release_id,
            "prompt_tokens": g.prompt_tokens,
            "completion_tokens": g.completion_tokens,
            "latency_ms": g.latency_ms,
            "first_token_ms": g.first_token_ms,
            "safety": safety_dict(answer),
        }, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
    err.print(f"conversation: {turn.conversation_id}", highlight=False)
    return 0


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
