"""One chat turn: validate, log the question, stream the answer, log the answer.

Shared by the CLI (`advisor ask`), the web UI and the REST/OpenAI APIs, so every surface logs
turns identically.

Design choices:
- Validate first, write second: the text goes through `clean_text`, the attributes are an
  `Attributes` (validated on construction), and the conversation/parent must belong to the user
  (`NotFound` otherwise, indistinguishable from "does not exist") before anything is written.
- The user message is stored at submit, in one transaction with the new conversation if there
  is one, so a question survives a model failure or a crash mid-answer. `send` and `edit` start
  the generation first and store the question while the model reads its prompt (the model
  needs only the text, not the row), so that commit is off the turn's critical path; if the
  question cannot be stored the generation is cancelled and nothing is answered. Nothing is
  acknowledged before both are durable: the answer's id exists only once it is stored.
- The answer is stored exactly once, when the stream ends: `complete`; `interrupted` when it was
  cancelled (stop button, client gone, Ctrl-C) — with the partial text; `error` with the error
  text when the backend failed, after which the user-facing `BackendError` is re-raised. A
  length-limited answer is `complete` with `finish_reason='length'`: the model did finish its
  budget, and the finish reason says it was cut.
- Submit returns as soon as the question is stored, so a surface has the conversation id (for
  a link, a header, `--conversation`) before the first token. A regenerated answer starts on
  first iteration (there is nothing to store before it).
- Regenerate adds an assistant sibling under the same user message; edit adds a user sibling
  under the same parent and answers it. The model sees `store.conversations.thread(conversation, leaf)`: the
  branch being answered, never the siblings.
- The safety guard (`chat.guard`, when the context has one) judges the question while the model
  reads its prompt (at submit; a risky one's generation is cancelled before anything of it is
  read; a regeneration is judged before it starts) and the answer at each sentence end and at its
  end. Judged before the model started, the first token took 1.42x as long as unguarded on a
  2-core CPU; judged alongside, 1.27x, and 1.08x with a request head that runs half the model's
  layers (bench/guard_overlap.py, docs/judges.md). A refused or
  replaced answer is stored `complete` with `finish_reason='content_filter'`,
  its text the refusal, and `generation.safety` says what the guard decided and why; the policy
  (`TurnContext.policy`) is the prompt's system message, whatever surface asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chat.backends.base import Backend, BackendError, Generation, SamplingParams
from chat.guard import ALLOWED, FINISH_FILTERED, REPLACED, AnswerWatch, Guard, Replace, with_policy
from chat.steering import check_mode
from store import MAX_MESSAGE_CHARS, GenerationMeta, InvalidInput, Message, NotFound, Store, clean_text
from store.attributes import Attributes


@dataclass
class TurnContext:
    """What a surface knows about how it answers: where to log, which model, how to steer."""

    store: Store
    backend: Backend
    steering: str = "steerlm"
    release_id: str | None = None
    # The release an answer came from, given the adapter its generation pinned (None: unknown,
    # keep `release_id`). `release_id` is read when the question is submitted, but the adapter is
    # pinned when generation starts; a promotion in between would otherwise log the wrong release.
    release_of: Callable[[str | None], str | None] | None = None
    max_chars: int = MAX_MESSAGE_CHARS
    source: str = "ui"  # ui | api | openai | cli | simulator (stored on new conversations)
    # Which arm serves a user while a canary runs: user id -> (adapter to pin, None = the active
    # one; arm label stored with the answer). None: everyone gets the active adapter, arm "live".
    route: Callable[[str], tuple[str | None, str]] | None = None
    # The safety guard (None: answers are neither judged nor refused) and the safety policy put
    # first in the system message of every prompt ('' = none).
    guard: Guard | None = None
    policy: str = ""

    def arm_of(self, user_id: str) -> tuple[str | None, str]:
        return self.route(user_id) if self.route is not None else (None, "live")

    def __post_init__(self) -> None:
        check_mode(self.steering)


def history(messages: list[Message]) -> list[dict]:
    """Messages as the model sees them. Failed answers (status 'error') are left out; earlier
    answers carry the attribute string they were generated with (SteerLM training format)."""
    out = []
    for m in messages:
        if m.role == "assistant" and m.status == "error":
            continue
        item = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.generation is not None:
            item["attributes"] = m.generation.attributes.steerlm()
        out.append(item)
    return out


class Turn:
    """A submitted turn. Iterate it for the answer's text deltas; the answer is logged when the
    iteration ends, however it ends. `cancel()` may be called from any thread."""

    def __init__(self, ctx: TurnContext, *, conversation_id: str, user_message: Message,
                 new_conversation: bool, attributes: Attributes, params: SamplingParams,
                 generation: Generation | None = None, start_error: Exception | None = None,
                 arm: tuple[str | None, str] = (None, "live"), request_risk: float | None = None) -> None:
        self.ctx = ctx
        self.adapter, self.arm = arm  # the adapter pinned for this user's arm (None: the active one)
        self.conversation_id = conversation_id
        self.user_message = user_message
        self.new_conversation = new_conversation
        self.attributes = attributes
        self.params = params
        self.generation = generation  # already running when submit started it
        self._start_error = start_error  # the backend refused at submit: raised (and logged) on iteration
        self.answer: Message | None = None
        self.error: Exception | None = None
        self.safety: dict | None = None  # the guard's decision, stored with the answer
        self._request_risk = request_risk  # judged at submit; None: judge when the turn starts
        self._refusal: str | None = None  # the text shown instead of the model's (refused / replaced)
        self._cancel = threading.Event()
        self._started = False

    @property
    def text(self) -> str:
        if self._refusal is not None:
            return self._refusal
        return self.generation.text if self.generation is not None else ""

    @property
    def filtered(self) -> bool:
        """Whether the guard wrote this answer (a refused request or a replaced answer)."""
        return self._refusal is not None

    def cancel(self) -> None:
        self._cancel.set()
        if self.generation is not None:
            self.generation.cancel()

    def __iter__(self) -> Iterator[str]:
        """The answer's text deltas; a `chat.guard.Replace` item withdraws what came before."""
        if self._started:
            raise RuntimeError("a Turn can be run only once")
        self._started = True
        stream = None
        guard, question = self.ctx.guard, self.user_message.content
        try:
            if self._start_error is not None:
                raise self._start_error
            if self._cancel.is_set():
                return
            if guard is not None and self._request_risk is None:  # a regeneration: judged now
                self._request_risk = guard.request_risk(question)
            own = guard.answer_to(question, self._request_risk) if guard is not None else None
            if own is not None:
                self._refusal, self.safety = own
                yield self._refusal
                return
            if self.generation is None:
                thread = self.ctx.store.conversations.thread(self.conversation_id, self.user_message.id)
                self.generation = _start_generation(self.ctx, history(thread), self.attributes, self.params,
                                                    self.adapter)
            if self._cancel.is_set():  # cancelled between submit and start
                self.generation.cancel()
            stream = iter(self.generation)
            watch = AnswerWatch()
            for delta in stream:
                if guard is not None and watch.due(self.generation.text) and self._unsafe(guard, question):
                    yield Replace(self._refusal)
                    return
                # As the store keeps it (PostgreSQL's text cannot hold NUL): what the reader saw
                # streaming is what the history shows afterwards.
                yield delta.replace("\x00", "\ufffd")
            finished = not self._cancel.is_set() and self.generation.finish_reason != "cancelled"
            if guard is not None and finished and watch.pending(self.generation.text) and self._unsafe(guard, question):
                yield Replace(self._refusal)
        except (GeneratorExit, KeyboardInterrupt, SystemExit):
            self.cancel()
            raise
        except Exception as exc:  # BackendError, or a bug: either way the answer is logged as failed
            self.error = exc
            raise
        finally:
            if stream is not None:
                stream.close()  # lets the backend finish its bookkeeping (token counts)
            self.answer = self._log_answer()

    def _unsafe(self, guard: Guard, question: str) -> bool:
        """Judge the answer so far; when unsafe, stop the model and put the refusal in its place."""
        text = self.generation.text
        risk = guard.answer_risk(question, text)
        if risk < guard.answer_threshold:
            self.safety = guard.verdict(ALLOWED, risk, request_score=self._request_risk)
            return False
        self.generation.cancel()
        self._refusal = guard.refusal_for(question)
        self.safety = guard.verdict(REPLACED, risk, request_score=self._request_risk,
                                    model_answer=text.replace("\x00", "\ufffd"))
        return True

    def run(self) -> Message:
        """Generate the whole answer and return it as stored (raises `BackendError` on failure)."""
        for _ in self:
            pass
        assert self.answer is not None
        return self.answer

    def _log_answer(self) -> Message:
        gen = self.generation
        if self.error is not None:
            status, finish = "error", "error"
        elif self.filtered:
            status, finish = "complete", FINISH_FILTERED
        elif self._cancel.is_set() or (gen is not None and gen.finish_reason == "cancelled"):
            status, finish = "interrupted", "cancelled"
        else:
            status, finish = "complete", (gen.finish_reason if gen is not None else "stop")
        backend = self.ctx.backend
        meta = GenerationMeta(
            backend=backend.kind,
            model=gen.model if gen is not None else _model_name(backend),
            adapter=gen.adapter if gen is not None else backend.active_adapter,
            release_id=self._release_id(gen),
            arm=self.arm,
            attributes=self.attributes,
            steering=self.ctx.steering,
            temperature=self.params.temperature,
            top_p=self.params.top_p,
            max_new_tokens=self.params.max_new_tokens,
            seed=self.params.seed,
            latency_ms=gen.latency_ms if gen is not None else None,
            first_token_ms=gen.first_token_ms if gen is not None else None,
            prompt_tokens=gen.prompt_tokens if gen is not None else None,
            completion_tokens=gen.completion_tokens if gen is not None else None,
            finish_reason=finish,
            error=str(self.error) if self.error is not None else None,
            safety=self._safety_record(),
        )
        return self.ctx.store.conversations.add_message(
            self.conversation_id, "assistant", self.text,
            parent_id=self.user_message.id, status=status, generation=meta,
        )


    def _safety_record(self) -> dict | None:
        guard = self.ctx.guard
        if guard is None or self.error is not None:
            return None
        if self.safety is None:  # nothing of the answer was judged (stopped before its first sentence)
            return guard.verdict(ALLOWED, None, request_score=self._request_risk)
        return self.safety

    def _release_id(self, gen: Generation | None) -> str | None:
        pinned = self.ctx.release_of(gen.adapter) if (gen is not None and self.ctx.release_of) else None
        return pinned if pinned is not None else self.ctx.release_id


def _model_name(backend: Backend) -> str:
    try:
        return backend.model
    except BackendError:  # e.g. a server that is down cannot tell us its model's name
        return "unknown"


# --------------------------------------------------------------------------- submitting


def send(
    ctx: TurnContext, *, user_id: str, text: str, conversation_id: str | None = None,
    parent_id: str | None = None, attributes: Attributes | None = None, params: SamplingParams | None = None,
) -> Turn:
    """A new question: in a new conversation, at the end of `conversation_id`'s current branch,
    or under `parent_id` (an answer in one of the user's conversations)."""
    text = clean_text(text, max_chars=ctx.max_chars)
    store = ctx.store
    prior: list[Message] = []
    if parent_id is not None:
        parent = store.conversations.get_message(parent_id, user_id=user_id)
        if conversation_id is not None and parent.conversation_id != conversation_id:
            raise NotFound(f"No message {parent_id!r} in conversation {conversation_id!r}.")
        conversation_id = parent.conversation_id
        prior = store.conversations.thread(conversation_id, parent_id)
    elif conversation_id is not None:
        store.conversations.get(conversation_id, user_id=user_id)
        prior = store.conversations.thread(conversation_id)
        parent_id = prior[-1].id if prior else None
    if conversation_id is None:  # a new conversation and its first question, or neither
        def store_question() -> Message:
            return store.conversations.start(user_id, text, source=ctx.source)[1]
    else:
        def store_question() -> Message:
            return store.conversations.add_message(conversation_id, "user", text, parent_id=parent_id)
    return _submit(ctx, prior, text, store_question, new_conversation=conversation_id is None,
                   attributes=attributes, params=params, user_id=user_id)


def _submit(ctx: TurnContext, prior: list[Message], text: str, store_question: Callable[[], Message], *,
            new_conversation: bool, attributes: Attributes | None, params: SamplingParams | None,
            user_id: str) -> Turn:
    """Start generating, then store the question while the model reads its prompt. The guard
    judges the request meanwhile: a risky one's generation is cancelled unread (nothing of it is
    shown or stored); a person in crisis never reaches the model."""
    attributes, params = attributes or Attributes(), params or SamplingParams()
    arm = ctx.arm_of(user_id)
    generation, start_error, risk = None, None, None
    try:
        if ctx.guard is None or not ctx.guard.in_crisis(text):
            generation = _start_generation(ctx, history(prior) + [{"role": "user", "content": text}], attributes,
                                           params, arm[0])
        if ctx.guard is not None:
            risk = ctx.guard.request_risk(text)
            if ctx.guard.answer_to(text, risk) is not None and generation is not None:
                generation.cancel()
                generation = None
    except Exception as exc:  # still store the question; the failure is logged as its answer
        if generation is not None:
            generation.cancel()
            generation = None
        start_error = exc
    try:
        question = store_question()
    except BaseException:
        if generation is not None:
            generation.cancel()
        raise
    return Turn(ctx, conversation_id=question.conversation_id, user_message=question,
                new_conversation=new_conversation, attributes=attributes, params=params,
                generation=generation, start_error=start_error, arm=arm, request_risk=risk)


def _start_generation(ctx: TurnContext, messages: list[dict], attributes: Attributes,
                      params: SamplingParams, adapter: str | None = None) -> Generation:
    messages = with_policy(messages, ctx.policy)
    if adapter is None:  # the active adapter: backends that predate arms need not take the keyword
        return ctx.backend.stream(messages, attributes=attributes, steering=ctx.steering, params=params)
    return ctx.backend.stream(messages, attributes=attributes, steering=ctx.steering, params=params, adapter=adapter)


def edit(
    ctx: TurnContext, *, user_id: str, message_id: str, text: str,
    attributes: Attributes | None = None, params: SamplingParams | None = None,
) -> Turn:
    """The user rewrote their question `message_id`: a sibling user message, then its answer."""
    text = clean_text(text, max_chars=ctx.max_chars)
    original = ctx.store.conversations.get_message(message_id, user_id=user_id)
    if original.role != "user":
        raise InvalidInput("Only your own questions can be edited.")
    prior = ctx.store.conversations.thread(original.conversation_id, original.parent_id) if original.parent_id else []
    return _submit(ctx, prior, text,
                   lambda: ctx.store.conversations.add_message(original.conversation_id, "user", text, parent_id=original.parent_id),
                   new_conversation=False, attributes=attributes, params=params, user_id=user_id)


def regenerate(
    ctx: TurnContext, *, user_id: str, message_id: str,
    attributes: Attributes | None = None, params: SamplingParams | None = None,
) -> Turn:
    """Another answer to the same question: `message_id` is the answer to replace (or the
    question itself). Adds an assistant sibling; no new user message."""
    message = ctx.store.conversations.get_message(message_id, user_id=user_id)
    if message.role == "assistant":
        if message.parent_id is None:
            raise InvalidInput("This answer has no question to answer again.")
        question = ctx.store.conversations.get_message(message.parent_id, user_id=user_id)
    elif message.role == "user":
        question = message
    else:
        raise InvalidInput("Only answers can be regenerated.")
    return Turn(ctx, conversation_id=question.conversation_id, user_message=question, new_conversation=False,
                attributes=attributes or Attributes(), params=params or SamplingParams(), arm=ctx.arm_of(user_id))
