"""`advisor serve`: run the service (UI, REST and OpenAI APIs, scheduler) under uvicorn.

Shutdown: on SIGTERM/SIGINT uvicorn stops accepting connections and waits up to `--grace`
seconds for open requests; at the same moment the service refuses new answers and gives the
ones being generated `--grace` seconds to finish, then cancels them, which stores them as
interrupted. Only then do the scheduler, the model and the database close. Nothing
acknowledged is lost: every stored message was committed when it was written.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any, Optional

import typer

from deploy.cli.common import settings_of


def serve(
    ctx: typer.Context,
    create_app: Callable[..., Any],
    host: str | None, port: int | None, grace: float, log_level: str,
) -> None:
    import uvicorn

    settings = settings_of(ctx)
    host = host or settings.server.host
    port = port or settings.server.port
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings, drain_s=grace)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=int(grace) + 5,
                            proxy_headers=True)
    server = GracefulServer(config, app)
    typer.echo(f"Advisor on http://{host}:{port}  (UI /, API /api/docs, OpenAI /v1, metrics /metrics)", err=True)
    # uvicorn re-raises the stop signal after its graceful shutdown, into the handler that was
    # there before it; make that a no-op so a clean stop exits 0 (what systemd/docker expect).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    server.run()
    typer.echo("Advisor stopped.", err=True)


class GracefulServer:
    """uvicorn.Server whose exit signal also starts draining in-flight answers right away."""

    def __new__(cls, config, app):
        import uvicorn

        class _Server(uvicorn.Server):
            def handle_exit(self, sig, frame) -> None:
                services = app.state.services
                if not services.inflight.closing:
                    services.inflight.close()
                    timer = threading.Timer(services.drain_s, services.inflight.cancel_all)
                    timer.daemon = True
                    timer.start()
                super().handle_exit(sig, frame)

        return _Server(config)


def register(app: typer.Typer, *, create_app: Callable[..., Any]) -> None:
    """`create_app(settings, drain_s=…)` builds the service (the composition root passes its own)."""

    def serve_command(
        ctx: typer.Context,
        host: Optional[str] = typer.Option(None, "--host", help="Interface to listen on (default: server.host)."),
        port: Optional[int] = typer.Option(None, "--port", "-p", help="Port (default: server.port)."),
        grace: float = typer.Option(20.0, "--grace", help="Seconds in-flight answers get to finish on shutdown."),
        log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
    ) -> None:
        """Serve the chat UI at /, the REST API at /api, the OpenAI API at /v1, /healthz and /metrics."""
        serve(ctx, create_app, host, port, grace, log_level)

    app.command("serve")(serve_command)
