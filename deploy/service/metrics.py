"""Prometheus metrics for one service instance.

Design choices:
- A `CollectorRegistry` per app, never prometheus_client's global one: two apps in one process
  (tests, an embedding) must not share or clash on counters.
- HTTP metrics are labelled by the route *template* (`/api/conversations/{conversation_id}`), not
  the raw path, so ids never explode the label set; everything Gradio serves is one `/ui` route.
- Chat-level metrics (turns, tokens, ratings, errors) are recorded where the event happens (the
  REST handlers, the OpenAI handlers and the UI through the hooks in `ChatHooks`), with the
  source (`api`, `openai`, `ui`) as a label.
"""

from __future__ import annotations

import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "advisor_http_requests_total", "HTTP requests by route and status.",
            ["method", "route", "status"], registry=r,
        )
        self.latency = Histogram(
            "advisor_http_request_seconds", "HTTP request latency (to the end of the body).",
            ["route"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.turns = Counter(
            "advisor_turns_total", "Answers generated, by source and final status.", ["source", "status"], registry=r
        )
        self.tokens = Counter(
            "advisor_tokens_total", "Tokens processed, by kind (prompt, completion).", ["kind"], registry=r
        )
        self.generation_seconds = Histogram(
            "advisor_generation_seconds", "Time to generate one answer.", ["source"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.ratings = Counter(
            "advisor_ratings_total", "Explicit ratings, by value (like, dislike).", ["value"], registry=r
        )
        self.errors = Counter(
            "advisor_errors_total", "Errors shown to users, by kind.", ["kind"], registry=r
        )
        self.in_flight = Gauge("advisor_generations_in_flight", "Answers being generated now.", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ---- recording helpers

    def record_turn(self, source: str, status: str, *, prompt_tokens: int | None, completion_tokens: int | None,
                    latency_ms: float | None) -> None:
        self.turns.labels(source, status).inc()
        if prompt_tokens:
            self.tokens.labels("prompt").inc(prompt_tokens)
        if completion_tokens:
            self.tokens.labels("completion").inc(completion_tokens)
        if latency_ms is not None:
            self.generation_seconds.labels(source).observe(latency_ms / 1000)

    def record_rating(self, value: int) -> None:
        self.ratings.labels({1: "like", -1: "dislike"}.get(value, "withdrawn")).inc()

    def record_error(self, kind: str) -> None:
        self.errors.labels(kind).inc()


class MetricsMiddleware:
    """Pure ASGI middleware (streams pass through untouched; latency runs to the last body chunk)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = _route_label(scope)
            self.metrics.requests.labels(scope.get("method", ""), route, str(status["code"])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


def _route_label(scope: Scope) -> str:
    raw = scope.get("path", "")
    if not raw.startswith(_OWN_PREFIXES):
        return "/ui"  # Gradio's pages, assets and queue
    path = getattr(scope.get("route"), "path", None)
    return path if path and "{" in path or path == raw else "unmatched"


_OWN_PREFIXES = ("/api/", "/v1/", "/healthz", "/metrics", "/signin", "/signout")
