"""The composition root: the `advisor` command line, the service, and what they are made of.

This is the top of the import graph (nothing else in the project imports it; import-linter keeps
it so). It builds the Typer app (`build_cli`, the `advisor` entry point) and the service
(`create_app`), handing the service its job kinds and operator panels.

Every command group, every job kind and every operator panel is named here by a plain import, so
a reader (and import-linter) can follow each one from this file to its module. Adding one is a
line here plus its module: see the README's "How to add…".

The imports sit inside the three functions, not at the top: the CLI must not pay for Gradio and
FastAPI to print `advisor --help`, and the service imports the operator screen only when it
mounts the UI.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from deploy.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from deploy.loop.jobs import JobRegistry
    from deploy.operator.screen import PanelBuilder


def build_cli() -> typer.Typer:
    """The `advisor` command line: the root options, then every command group."""
    app = typer.Typer(
        name="advisor",
        help="Advisor: a steerable advice chatbot that learns from natural feedback.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
        add_completion=False,
    )

    @app.callback()
    def root(
        ctx: typer.Context,
        config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML settings file (or ADVISOR_CONFIG)."),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (or ADVISOR_DATA_DIR)."),
    ) -> None:
        overrides = {"data_dir": str(data_dir)} if data_dir else {}
        try:
            ctx.obj = load_settings(config, overrides=overrides)
        except SettingsError as exc:
            typer.secho(f"Settings error: {exc}", fg="red", err=True)
            raise typer.Exit(2) from None

    register_commands(app)
    return app



def main() -> None:
    sys.exit(build_cli()())


def create_app(settings: Settings, **kwargs: Any) -> "FastAPI":
    """The service with every job kind and operator panel (`deploy.service.app.create_app`'s
    other arguments pass through: a backend or store to use, ui=False, drain_s)."""
    from deploy.service.app import create_app as create_service

    return create_service(settings, register_jobs=register_jobs, operator_panels=operator_panels, **kwargs)



def register_commands(app: "typer.Typer") -> None:
    """The `advisor` command groups, in help order."""
    from deploy.cli import (
        audit,
        chat,
        config,
        cycle,
        data,
        evaluate,
        extract,
        model,
        release,
        safety,
        serve,
        simulate,
        train,
        vllm,
    )

    for group in (config, data, chat, model):
        group.register(app)
    serve.register(app, create_app=create_app)
    for group in (extract, train, evaluate, release, cycle, vllm, simulate, audit, safety):
        group.register(app)


def register_jobs(registry: "JobRegistry") -> list[str]:
    """The service's job kinds (scheduled and manual); returns the modules that registered."""
    from deploy.loop import cycle_jobs, extraction, privacy, training

    modules = (extraction, training, cycle_jobs, privacy)  # cycle_jobs: the "cycle", "gate" and "canary" jobs
    for module in modules:
        module.register_jobs(registry, registry.ctx)
    return [m.__name__ for m in modules]


def operator_panels(services: Any) -> list["PanelBuilder"]:
    """The operator screen's panels below its overview, top to bottom."""
    from deploy.operator import audit, canary, controls, cycle, feedback, releases, review, safety, serving, training

    modules = (feedback, review, safety, serving, releases, canary, controls, training, cycle, audit)
    return [module.operator_panel(services) for module in modules]


if __name__ == "__main__":
    main()
