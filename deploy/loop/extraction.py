"""The extraction job inside the service: scheduled every N minutes and on the operator's button.

One `ExtractionRunner` per service holds the store's extraction lock, so a scheduled run and a
manual one never process the same messages: the second waits (manual) or records 'skipped'
(schedule). The LLM extractor gets a greedy completion function over the extraction model when
`extraction.url` names one (a larger model on its own vLLM server), else over the service's own
backend, so in production it runs on vLLM beside the chat.
"""

from __future__ import annotations

import functools

from deploy.loop.jobs import JobContext, JobRegistry
from deploy.serving.factory import extraction_backend, extraction_reranker, greedy_completion, reranker_path
from feedback.extract import make_extractor
from feedback.extract.runner import ExtractionRunner, run_extraction


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings
    own = extraction_backend(settings)  # made once: its HTTP client is reused by every run
    reranker_path(settings)  # a wrong path fails the start; the tier itself loads on first use (seconds, ≈ 90 MB)
    reranker = functools.cache(lambda: extraction_reranker(settings))

    def extractor_for(kind: str):
        complete = None
        if kind != "fast":
            complete = greedy_completion(own or ctx.backend, settings.steering_mode,
                                         max_new_tokens=settings.extraction.max_new_tokens)
        return make_extractor(kind, complete=complete, batch_size=settings.extraction.batch_size,
                              reranker=reranker() if kind != "llm" else None)

    runner = ExtractionRunner(ctx.store, extractor_for)
    ctx.extras["extraction"] = runner

    def extract(job: JobContext) -> dict:
        kind = job.params.get("extractor") or settings.schedule.extractor
        scheduled = job.job is not None and job.job.trigger == "schedule"
        result = run_extraction(
            job.store, runner.make_extractor(kind), lock=runner.lock, trigger=job.job.trigger if job.job else "manual",
            chunk_size=runner.chunk_size, wait=not scheduled, job_id=job.job.id if job.job else None,
        )
        out = result.as_dict()
        if result.status == "failed":
            raise RuntimeError("; ".join(result.errors) or "extraction failed")
        if result.status == "skipped":
            out["status"] = "skipped"
        return out

    registry.add(
        "extract", extract,
        description="Mine natural feedback from messages newer than the watermark.",
        button="Run extraction now",
        every_minutes=settings.schedule.extract_every_minutes or None,
    )
