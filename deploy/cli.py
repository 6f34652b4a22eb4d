"""The `advisor` command line: a thin Typer shell over plain functions.

Each area registers its own commands from a `deploy/cli_<area>.py` module with a
`register(app)` function, so the command groups stay small and owned by the code they drive.
Options common to every command (`--config`, `--data-dir`) live on the root callback and reach
subcommands through `ctx.obj` as loaded `Settings`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from deploy.modules import listed_modules
from deploy.settings import Settings, SettingsError, load_settings

# Command modules, in help order. Each defines `register(app: typer.Typer) -> None`.
COMMAND_MODULES = [
    "deploy.cli_core",
    "deploy.cli_chat",
    "deploy.cli_model",
    "deploy.cli_serve",
    "deploy.cli_extract",
    "deploy.cli_train",
    "deploy.cli_eval",
    "deploy.cli_release",
    "deploy.cli_cycle",
    "deploy.cli_vllm",
    "deploy.cli_simulate",
]


def build_app() -> typer.Typer:
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

    for module in listed_modules(COMMAND_MODULES):
        module.register(app)
    return app


def settings_of(ctx: typer.Context) -> Settings:
    """The loaded settings, from the root callback."""
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = load_settings()
    return root.obj


def main() -> None:
    app = build_app()
    sys.exit(app())


if __name__ == "__main__":
    main()
