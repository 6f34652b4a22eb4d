"""Build, cache and locate the built-in model.

The model directory is named by a recipe hash: SHA-256 over the corpus file's bytes, the
tokenizer/model/training hyper-parameters and RECIPE_VERSION (bump it when the build code
changes what it produces). Same recipe, same directory: `build_builtin_model` returns the
cached one at once; change any ingredient and a new directory is built beside the old.

The package ships the current recipe's build (`prebuilt/`, 5.5 MB: what `advisor model build
--model builtin --force` made on a 2-core CPU, with its `build_info.json`), so a fresh machine
and CI skip the 8–15 minute training: `build_builtin_model` copies it into the data directory
when its recipe hash is the current one, and trains only when the recipe has changed since
(or with `force`). `tests/chat/test_builtin_model.py` fails when the shipped build no longer matches
the recipe and says how to refresh it.

Crash safety: everything is written into a temporary sibling directory and renamed into
place only after `build_info.json` (written last) is complete, so a killed build never leaves
a directory that looks finished. A lock file serialises concurrent builds of the same recipe
(a CLI build and a test session, say): the second waits, then finds the first one's result.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from chat.builtin.corpus import CORPUS_PATH, load_corpus, tokenizer_texts
from chat.builtin.model import ModelShape, new_model
from chat.builtin.sft import Augmenter, Progress, TrainConfig, encode, train
from chat.builtin.tokenizer import train_tokenizer

RECIPE_VERSION = 5
INFO_FILE = "build_info.json"
PREBUILT = Path(__file__).resolve().parent / "prebuilt"


@dataclass(frozen=True)
class Recipe:
    vocab_size: int = 4096
    shape: ModelShape = field(default_factory=ModelShape)
    train: TrainConfig = field(default_factory=TrainConfig)
    corpus_path: Path = CORPUS_PATH

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(self.corpus_path.read_bytes())
        params = {"version": RECIPE_VERSION, "vocab_size": self.vocab_size,
                  "shape": asdict(self.shape), "train": asdict(self.train)}
        h.update(json.dumps(params, sort_keys=True).encode())
        return h.hexdigest()[:16]


def builtin_model_path(data_dir: Path, recipe: Recipe | None = None) -> Path:
    """Where the built-in model for the current recipe lives (it may not be built yet)."""
    recipe = recipe or Recipe()
    return Path(data_dir) / "models" / f"builtin-{recipe.digest()}"


def is_built(path: Path) -> bool:
    return (path / INFO_FILE).is_file()


def build_builtin_model(data_dir: Path, *, force: bool = False, progress: Progress | None = None,
                        recipe: Recipe | None = None) -> Path:
    """Return the built-in model directory, building it first if needed (or if `force`).

    `progress(step, total, loss)` is called after every training step.
    """
    recipe = recipe or Recipe()
    final = builtin_model_path(data_dir, recipe)
    if is_built(final) and not force:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _lock(final.with_name(final.name + ".lock")):
        if is_built(final) and not force:  # another process finished it while we waited
            return final
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            if not force and shipped_recipe_hash() == recipe.digest():
                shutil.copytree(PREBUILT, tmp)
            else:
                _build_into(tmp, recipe, progress)
            _replace_dir(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def shipped_recipe_hash() -> str | None:
    """The recipe hash of the build shipped in the package (None when there is none)."""
    info = PREBUILT / INFO_FILE
    return json.loads(info.read_text())["recipe_hash"] if info.is_file() else None


def _build_into(out: Path, recipe: Recipe, progress: Progress | None) -> None:
    t0 = time.monotonic()
    examples = load_corpus(recipe.corpus_path)
    tok = train_tokenizer(tokenizer_texts(recipe.corpus_path), recipe.vocab_size,
                          model_max_length=recipe.shape.max_position_embeddings)
    model = new_model(recipe.shape, tok, recipe.train.seed)
    augment = Augmenter(examples, recipe.train.seed)

    def epoch_data(epoch: int) -> list:
        head = (recipe.train.head_tokens, recipe.train.head_weight)
        return [encode(c, tok, recipe.train.max_len, head) for c in augment.epoch(epoch)]

    threads = training_threads()
    with _torch_threads(threads):
        stats = train(model, epoch_data, len(examples), recipe.train, tok.pad_token_id, progress)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    info = {
        "recipe_hash": recipe.digest(),
        "recipe_version": RECIPE_VERSION,
        "vocab_size": len(tok),
        "shape": asdict(recipe.shape),
        "train": asdict(recipe.train),
        "examples": len(examples),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "threads": threads,
        **stats,
        "build_seconds": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # Written last: its presence is what marks a directory as a finished build.
    (out / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")


def training_threads() -> int:
    """Intra-op threads for the build: torch's default (at most 4) on an idle machine, 1 on a busy one.

    Measured on 2 cores: two threads train about 1.6x faster than one when the cores are free,
    but when other processes keep them busy, the two OpenMP threads wait on each other and the
    build runs 2-4x slower than on one thread. The weights are bit-identical either way (checked),
    so this choice changes only the time taken, never the model or its recipe hash.
    """
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load = 0.0
    return max(1, min(torch.get_num_threads(), 4)) if load < cores / 2 else 1


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _replace_dir(src: Path, dst: Path) -> None:
    """Move a finished build into place; an older build at `dst` is swapped out, then removed."""
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
