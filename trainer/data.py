"""Loading and checking a run's training-set snapshot before any model is touched.

A run must fail in a second, with a message that names the file, row and field, when its data
is empty or malformed — not twenty seconds later inside a TRL map with a KeyError. So the
snapshot is checked here with pyarrow alone (no torch import), then handed to `datasets`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from feedback.datasets import EVAL_FILE, TRAIN_COLUMNS, TRAIN_FILE, rows_sha256
from store.attributes import Attributes, InvalidAttributes, SteeringMode, with_instructions

ROLES = ("system", "user", "assistant")


class DataError(ValueError):
    """The snapshot cannot be trained on; the message says where and why."""


def _read(path: Path, method: str) -> list[dict[str, Any]]:
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem for the user
        raise DataError(f"{path.name} is not a readable Parquet file ({exc}). Rebuild the dataset.") from None
    missing = [c for c in TRAIN_COLUMNS[method] if c not in table.column_names]
    if missing:
        raise DataError(
            f"{path.name} lacks column(s) {missing} needed for {method}; it has {table.column_names}. "
            f"Build it with `advisor dataset build --kind {method}`."
        )
    return table.to_pylist()


def _check_messages(value: Any, where: str, *, assistant_only: bool = False) -> None:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: expected a non-empty list of messages, got {type(value).__name__}")
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise DataError(f"{where}[{i}]: a message needs a 'role' and a text 'content'")
        if msg.get("role") not in ROLES:
            raise DataError(f"{where}[{i}]: unknown role {msg.get('role')!r}; use {', '.join(ROLES)}")
        if assistant_only and msg["role"] != "assistant":
            raise DataError(f"{where}[{i}]: the answer must be an assistant message, got {msg['role']!r}")
    if assistant_only and not value[-1]["content"].strip():
        raise DataError(f"{where}: the answer is empty")


def check_rows(rows: list[dict[str, Any]], method: str, name: str) -> None:
    answers = ("chosen", "rejected") if method == "dpo" else ("completion",)
    for n, row in enumerate(rows):
        where = f"{name} row {n}"
        _check_messages(row["prompt"], f"{where} prompt")
        if row["prompt"][-1]["role"] != "user":
            raise DataError(f"{where} prompt: must end with a user message, ends with {row['prompt'][-1]['role']!r}")
        for col in answers:
            _check_messages(row[col], f"{where} {col}", assistant_only=True)
        if method == "kto" and not isinstance(row["label"], bool):
            raise DataError(f"{where} label: must be true (desirable) or false (undesirable), got {row['label']!r}")
        kwargs = row.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise DataError(f"{where} chat_template_kwargs: must be a mapping, got {type(kwargs).__name__}")


def _clean(row: dict[str, Any], method: str, steering: SteeringMode) -> dict[str, Any]:
    """Only the trained columns (the bookkeeping ones would confuse TRL's format detection), the
    prompt rendered as the model saw it: a SteerLM string stays the template's `attributes`
    kwarg; under "instruct" steering it becomes the instructions the chat appended to the last
    user message (the same function renders both), and the kwarg is dropped."""
    out = {c: row[c] for c in TRAIN_COLUMNS[method]}
    attributes = (row.get("chat_template_kwargs") or {}).get("attributes")
    if steering == SteeringMode.INSTRUCT:
        parsed = Attributes.parse(attributes) if attributes else None
        out["prompt"] = with_instructions(row["prompt"], parsed)
        for col in ("completion", "chosen", "rejected"):
            if col in out:
                out[col] = with_instructions(out[col], None)
        attributes = None
    out["chat_template_kwargs"] = {"attributes": attributes}
    return out


def load_snapshot(run_dir: Path, method: str,
                  steering: SteeringMode = SteeringMode.STEERLM) -> tuple[list[dict], list[dict], str]:
    """(train rows, eval rows, data hash) of the run directory, checked, rendered for `steering`
    (`_clean`). Raises DataError; the hash is of the stored rows, whatever the rendering."""
    run_dir = Path(run_dir)
    train_path, eval_path = run_dir / TRAIN_FILE, run_dir / EVAL_FILE
    if not train_path.exists():
        raise DataError(f"{train_path} does not exist; build a dataset into the run directory first.")
    train = _read(train_path, method)
    evals = _read(eval_path, method) if eval_path.exists() else []
    if not train:
        raise DataError(
            f"{train_path.name} has no rows: there is nothing to train on. Collect more feedback "
            f"(likes/dislikes, natural feedback, regenerations), run extraction, then build the {method} set again."
        )
    check_rows(train, method, train_path.name)
    check_rows(evals, method, eval_path.name)
    data_hash = rows_sha256(train + evals)
    try:
        return ([_clean(r, method, steering) for r in train], [_clean(r, method, steering) for r in evals],
                data_hash)
    except InvalidAttributes as exc:
        raise DataError(f"{train_path.name}: a row's chat_template_kwargs.attributes is not a SteerLM string "
                        f"({exc}). Rebuild the dataset.") from None
