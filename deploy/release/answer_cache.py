"""The live release's gate answers, kept between gates, so each gate generates only the candidate's.

    cache = AnswerCache.for_release(settings.data_path, live.id, [base_model_dir, adapter_dir])
    answer = cache.wrap(answer, prompt_of, generation)   # answer(questions) -> answers, cached

Design choices:
- Keyed by (release id, the prompt as the model is given it, the generation settings). The prompt
  is the rendered chat (messages with the steering and the safety policy in them, and the
  template's arguments), so a change in the sliders' rendering, the policy, `gate.max_new_tokens`
  or the decoding misses the cache and the answers are generated again.
- The key also holds the size and modification time of the model's weight and config files
  (base model and adapter): a release's adapter never changes under its id, but a base model
  directory can be rebuilt in place (`advisor model build`), and then its answers are stale.
- One JSON-lines file per release under `<data_dir>/gate_answers/`, appended as answers are made
  and read whole when a gate starts; an unreadable line (a crash mid-write) is skipped, so the
  worst a damaged file costs is generating those answers again.
- A cached answer was generated in another batch than a fresh one would be; greedy decoding with
  left padding gives the same text in practice, and the gate pairs each prompt's two answers
  whatever batch they came from.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("advisor.gate")

AnswerFn = Callable[[Sequence[str]], list[str]]


class AnswerCache:
    """One release's answers by prompt and generation settings, on disk."""

    def __init__(self, path: Path, release_id: str, model_dirs: Sequence[str | Path | None] = ()) -> None:
        self.path, self.release_id = Path(path), release_id
        self.model = fingerprint(model_dirs)
        self.answers: dict[str, str] = {}
        self.hits = self.misses = 0
        text = self.path.read_text(encoding="utf-8") if self.path.is_file() else ""
        self._torn = bool(text) and not text.endswith("\n")  # the next line must not join the torn one
        for line in text.splitlines():
            try:
                row = json.loads(line)
                self.answers[row["key"]] = row["answer"]
            except (ValueError, KeyError, TypeError):
                log.warning("gate answer cache %s: skipping an unreadable line", self.path)

    @classmethod
    def for_release(cls, data_dir: Path, release_id: str, model_dirs: Sequence[str | Path | None] = ()) -> AnswerCache:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in release_id)
        return cls(Path(data_dir) / "gate_answers" / f"{safe}.jsonl", release_id, model_dirs)

    def key(self, prompt: Any, generation: dict) -> str:
        blob = json.dumps([self.release_id, self.model, prompt, generation], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def wrap(self, answer: AnswerFn, prompt_of: Callable[[str], Any], generation: dict) -> AnswerFn:
        """`answer` with this cache in front: only the questions it has no answer to are generated
        (in one call, so the generator batches them)."""

        def cached(questions: Sequence[str]) -> list[str]:
            keys = [self.key(prompt_of(q), generation) for q in questions]
            todo = {k: q for k, q in zip(keys, questions) if k not in self.answers}
            self.hits += len(keys) - len(todo)
            self.misses += len(todo)
            if todo:
                fresh = answer(list(todo.values()))
                self._add(dict(zip(todo, fresh)))
            return [self.answers[k] for k in keys]

        return cached

    def _add(self, answers: dict[str, str]) -> None:
        self.answers.update(answers)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            if self._torn:
                f.write("\n")
                self._torn = False
            f.writelines(json.dumps({"key": k, "answer": a}, ensure_ascii=False) + "\n" for k, a in answers.items())


def fingerprint(model_dirs: Sequence[str | Path | None]) -> list[list]:
    """(name, size, mtime) of each weight and config file in the model directories."""
    out = []
    for d in model_dirs:
        if not d:
            continue
        for f in sorted(Path(d).iterdir()) if Path(d).is_dir() else []:
            if f.is_file() and f.suffix in (".safetensors", ".bin", ".json"):
                st = f.stat()
                out.append([str(f), st.st_size, st.st_mtime_ns])
    return out
