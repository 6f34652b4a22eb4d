"""`advisor config show`: the effective settings (defaults < TOML file < environment < flags)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli.common import settings_of
from deploy.settings import masked


def config_show(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the effective settings (file + environment + flags), secrets masked."""
    tree = masked(settings_of(ctx))
    if as_json:
        print(json.dumps(tree, indent=2))
        return
    table = Table("setting", "value")

    def rows(node: dict, prefix: str = "") -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                rows(value, f"{prefix}{key}.")
            else:
                table.add_row(f"{prefix}{key}", str(value))

    rows(tree)
    Console().print(table)


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Settings.", no_args_is_help=True)
    config_app.command("show")(config_show)
    app.add_typer(config_app, name="config")
