"""Incremental extraction runs over the store (the operator screen's reads of their output are in
`store.reports`).

Design choices:
- A run processes only user messages with `seq` above the extractor's watermark
  (`extract:<name>`), up to the highest `seq` at its start (later messages wait for the next run).
  Store writes are serialised, so `seq` order is commit order and nothing can appear below the
  watermark later.
- Each user message comes with the context it needs, on its own branch of the message tree: the
  assistant message it replied to (its parent) and the user message that answer replied to (the
  grandparent); for an extractor that reads whole conversations (`needs_history`: the LLM), the
  whole branch before it (`branch_histories`), so the model sees what the paper's model saw. A user message without both is a conversation's first request, or follows a
  failed answer: never feedback, but the watermark still moves past it.
- Streaming in chunks (keyset pagination on `seq`), one transaction per chunk for the events and
  the watermark together: memory stays flat, a crash loses at most the chunk in flight, and a
  chunk is never half-applied. Events skip duplicates on (message, category, offsets,
  extractor), so a rerun adds none; a chunk's events go in as one statement
  (`Events.add`). The store's typed reads supply the chunks
  (`store.analytics.user_turns_after`); this module holds no SQL.
- Every run is a `jobs` row (kind 'extract') with counts per category and extractor, dropped
  items by reason, errors and duration; a running job's row is updated after every chunk.
- Concurrency: a scheduled and a manual run must not process the same messages twice. The caller
  passes a `threading.Lock` that belongs to the store it opened (the service keeps one next to its
  Store; `ExtractionRunner` bundles the two). Not a module-level lock: that would couple every
  store in the process (tests open many) and hide the owner. The second run waits for the lock or,
  with `wait=False`, records a 'skipped' job saying which job is running. As a second line of
  defence each chunk's transaction moves the watermark only if it is still where the run left it
  (`Events.move_watermark`, a compare-and-set), so even two runs given different locks — two
  processes on one PostgreSQL store — cannot both write the same chunk.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from feedback.extract.types import Extractor, ExtractorUnavailable, Window
from store import FeedbackEvent, Store
from store.analytics import branch_histories, user_turns_after
from store.taxonomy import CATEGORY_IDS

JOB_KIND = "extract"
MAX_ERRORS_KEPT = 20

class WatermarkMoved(RuntimeError):
    """Another run advanced the watermark under this one; this run stops without writing."""


@dataclass
class JobResult:
    job_id: str
    status: str  # succeeded | failed | skipped
    trigger: str
    extractor: str
    messages: int = 0  # user messages read past the watermark
    windows: int = 0  # of those, the ones that follow an answer (feedback candidates)
    new_events: int = 0
    per_category: dict[str, int] = field(default_factory=dict)
    per_extractor: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    watermark_from: int = 0
    watermark_to: int = 0
    chunks: int = 0
    duration_s: float = 0.0
    reason: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def watermark_name(extractor: Extractor) -> str:
    return f"{JOB_KIND}:{extractor.name}"


def _running_job(store: Store, exclude: str | None = None) -> str | None:
    job = store.jobs.running(JOB_KIND, exclude=exclude)
    return job.id if job else None


def _skip(store: Store, extractor: Extractor, trigger: str, params: dict, job_id: str | None) -> JobResult:
    running = _running_job(store, exclude=job_id)
    reason = (f"another extraction run is in progress (job {running})" if running
              else "another extraction run holds the lock")
    if job_id is None:
        job_id = store.jobs.create(JOB_KIND, trigger=trigger, params=params, status="skipped").id
    out = JobResult(job_id, "skipped", trigger, extractor.name, reason=reason)
    store.jobs.update(job_id, status="skipped", result=out.as_dict())
    return out


def run_extraction(
    store: Store,
    extractor: Extractor,
    *,
    lock: threading.Lock,
    trigger: str = "manual",
    chunk_size: int = 2000,
    wait: bool = True,
    timeout: float | None = None,
    progress: Callable[[JobResult], None] | None = None,
    job_id: str | None = None,
) -> JobResult:
    """Extract feedback from every user message newer than the extractor's watermark.

    `lock` serialises runs on this store (see the module docstring). `wait=False` records a
    'skipped' job instead of waiting when another run holds it; `timeout` bounds the wait.
    `progress` is called after every chunk with the running totals. `job_id`: a jobs row the
    caller already made (the service's job registry does) to record this run on, instead of a
    new one; its kind should be 'extract'."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    params = {"extractor": extractor.name, "version": extractor.version, "chunk_size": chunk_size}
    config = getattr(extractor, "config", None)
    if config is not None and hasattr(config, "as_dict"):
        params["config"] = config.as_dict()
    acquired = lock.acquire(timeout=timeout) if wait and timeout is not None else lock.acquire(blocking=wait)
    if not acquired:
        return _skip(store, extractor, trigger, params, job_id)
    try:
        return _run(store, extractor, trigger=trigger, chunk_size=chunk_size, params=params, progress=progress,
                    job_id=job_id)
    finally:
        lock.release()


def _run(store: Store, extractor: Extractor, *, trigger: str, chunk_size: int, params: dict,
         progress: Callable[[JobResult], None] | None, job_id: str | None) -> JobResult:
    started = time.perf_counter()
    job = store.jobs.create(JOB_KIND, trigger=trigger, params=params) if job_id is None else store.jobs.get(job_id)
    name = watermark_name(extractor)
    versions = getattr(extractor, "versions", {extractor.name: extractor.version})
    needs_history = bool(getattr(extractor, "needs_history", False))  # whole conversations (the LLM)
    cursor = store.events.get_watermark(name)
    high = store.conversations.last_message_seq()
    out = JobResult(job.id, "running", trigger, extractor.name, watermark_from=cursor, watermark_to=cursor)
    stats: Counter = Counter()
    error: str | None = None
    try:
        while cursor < high:
            rows = user_turns_after(store, cursor, high, chunk_size)
            if not rows:
                break
            windows, meta = [], []
            candidates = [r for r in rows if r.answer_id is not None and r.previous is not None]
            histories = branch_histories(store, [r.id for r in candidates]) if needs_history else {}
            for msg_id, conv_id, _seq, content, answer_id, answer, previous in candidates:
                windows.append(Window(msg_id, content, answer, previous, conversation=conv_id,
                                      history=histories.get(msg_id, ())))
                meta.append((conv_id, answer_id))
            result = extractor.extract(windows) if windows else None
            events = []
            if result is not None:
                stats.update(result.stats)
                out.errors += result.errors[:max(0, MAX_ERRORS_KEPT - len(out.errors))]
                for window, (conv_id, answer_id), spans in zip(windows, meta, result.spans):
                    events += [FeedbackEvent(
                        conversation_id=conv_id, message_id=window.key, target_message_id=answer_id,
                        category=s.category, span=s.text, span_start=s.start, span_end=s.end,
                        extractor=s.extractor, extractor_version=versions.get(s.extractor, extractor.version),
                        job_id=job.id,
                    ) for s in spans]
            new_cursor = int(rows[-1].seq)
            with store.transaction():
                if not store.events.move_watermark(name, cursor, new_cursor):  # compare-and-set, first: it locks the row
                    raise WatermarkMoved(
                        f"the watermark {name} moved under this run (another run wrote it); stopped without writing")
                out.new_events += store.events.add(events)
            cursor = new_cursor
            out.messages += len(rows)
            out.windows += len(windows)
            out.chunks += 1
            out.watermark_to = cursor
            if progress is not None or out.chunks % 10 == 1:
                _fill(store, out, stats, started)
                store.jobs.update(job.id, result=out.as_dict())
                if progress is not None:
                    progress(out)
    except ExtractorUnavailable as exc:
        error = f"extractor unavailable, will retry from seq {cursor} on the next run: {exc}"
    except WatermarkMoved as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a job row must always say how the run ended
        error = f"{type(exc).__name__}: {exc}"
    _fill(store, out, stats, started)
    out.status = "failed" if error else "succeeded"
    if error:
        out.errors.append(error)
    store.jobs.update(job.id, status=out.status, result=out.as_dict(), error=error)
    return out


def _fill(store: Store, out: JobResult, stats: Counter, started: float) -> None:
    """Counts of the events this job inserted (not those ignored as duplicates), and the rest."""
    per_category = {c: 0 for c in CATEGORY_IDS}
    per_extractor: dict[str, int] = {}
    for category, extractor, n in store.events.counts(out.job_id):
        per_category[category] = per_category.get(category, 0) + int(n)
        per_extractor[extractor] = per_extractor.get(extractor, 0) + int(n)
    out.per_category, out.per_extractor = per_category, per_extractor
    dropped_keys = ("malformed", "unknown_category", "span_", "no_output", "empty_output", "no_json",
                    "duplicate_item", "too_many", "window_failed")
    out.dropped = {k: int(v) for k, v in sorted(stats.items()) if any(d in k for d in dropped_keys)}
    out.stats = {k: int(v) for k, v in sorted(stats.items()) if k not in out.dropped}
    out.duration_s = round(time.perf_counter() - started, 3)


class ExtractionRunner:
    """What the service keeps per open store: the store, its extraction lock, and a way to make
    extractors by kind. The scheduler calls `run("fast", trigger="schedule", wait=False)`; the
    "run extraction now" button calls `run(kind, trigger="manual")`."""

    def __init__(self, store: Store, make_extractor: Callable[[str], Extractor], *, chunk_size: int = 2000):
        self.store = store
        self.make_extractor = make_extractor
        self.chunk_size = chunk_size
        self.lock = threading.Lock()

    def run(self, kind: str = "fast", *, trigger: str = "manual", wait: bool = True,
            timeout: float | None = None) -> JobResult:
        return run_extraction(self.store, self.make_extractor(kind), lock=self.lock, trigger=trigger,
                              chunk_size=self.chunk_size, wait=wait, timeout=timeout)

    @property
    def busy(self) -> bool:
        return self.lock.locked()
