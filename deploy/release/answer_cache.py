"""The live release's gate answers, HH scores and judges' scores, kept between gates, so each gate
generates and scores only the candidate's.

    cache = AnswerCache.for_release(settings.data_path, live.id, [base_model_dir, adapter_dir])
    answer = cache.wrap(answer, prompt_of, generation)   # answer(questions) -> answers, cached
    scorer = cache.scorer(scorer, {"scorer": "loglik_mean"})   # scorer.score(prompts, answers), cached
    judge = cache.judge(judge)   # judge.score / answer_risk / request_risk, cached

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
- The batch size is in the key: a sampled answer's text depends on its batch (each batch draws
  from a generator seeded by the draw's seed, also in the key, and the batch's index), and a
  greedy one in bfloat16 on its batch's padding and on the torch threads it ran on (also in the
  key). The steering grid's cells add their answers side by side, one whole line each under a lock.
  HH and judges' scores came out the same to 3 decimals on one thread a batch as on two
  (`bench/gate_streams.py`), so their keys do not hold the threads: a pair tied that closely is a
  coin flip either way. Within one batch size, a cached
  answer may still have been generated beside other prompts than a fresh one would be (only a
  wholly cached or wholly fresh set repeats itself); the gate pairs each prompt's two answers
  whatever batch they came from. The same holds for a cached HH score (a log-likelihood computed
  in another batch can differ in the last float bits, never in which side of a pair is higher
  unless the two are within that noise, and such a near tie is a coin flip either way).
- A judge's score is keyed by the judge's `fingerprint` (its weights, encoder and feature recipe)
  as well as the request and answer, so refitted judges score the cached answers afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
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
        self.answers: dict[str, Any] = {}  # key -> an answer (str) or an HH score (float)
        self.hits = self.misses = 0
        self._lock = threading.Lock()  # the gate's streams add answers side by side
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
            out, reused = self._through([self.key(prompt_of(q), generation) for q in questions], questions, answer)
            with self._lock:
                self.hits, self.misses = self.hits + reused, self.misses + len(questions) - reused
            return out

        return cached

    def _through(self, keys: list[str], items: Sequence[Any], make: Callable[[list], list]) -> tuple[list, int]:
        """The values of `keys`, making the missing ones from their `items` in one call; and how many were reused."""
        todo = {k: item for k, item in zip(keys, items) if k not in self.answers}
        if todo:
            self._add(dict(zip(todo, make(list(todo.values())))))
        return [self.answers[k] for k in keys], len(keys) - len(todo)

    def scorer(self, scorer: Any, settings: dict) -> CachedScorer:
        """`scorer` (`score(prompts, answers)`, evaluator.scoring.Scorer) with this cache in front,
        keyed by each (conversation, answer) and `settings` (what makes the score: scorer, truncation)."""
        return CachedScorer(self, scorer, settings)

    def judge(self, judge: Any) -> CachedJudge:
        """`judge` (`evaluator.judges`: `score`, `answer_risk`, `request_risk`) with this cache in front."""
        return CachedJudge(self, judge)

    def _add(self, answers: dict[str, Any]) -> None:
        with self._lock:
            self._append(answers)

    def _append(self, answers: dict[str, Any]) -> None:
        self.answers.update(answers)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            if self._torn:
                f.write("\n")
                self._torn = False
            f.writelines(json.dumps({"key": k, "answer": a}, ensure_ascii=False) + "\n" for k, a in answers.items())


class CachedScorer:
    """A scorer whose scores of one release come from its cache when it has them; only the rest
    are scored, in one call. `reused` and `scored` count them."""

    def __init__(self, cache: AnswerCache, scorer: Any, settings: dict) -> None:
        self.cache, self.inner, self.settings = cache, scorer, settings
        self.reused = self.scored = 0

    def score(self, prompts: Sequence[Any], answers: Sequence[str]) -> list[float]:
        return self._cached("score", list(prompts), list(answers))

    def _cached(self, method: str, prompts: list, answers: list | None) -> list[float]:
        """`self.inner.<method>(prompts[, answers])` through the cache."""
        settings = self.settings if method == "score" else {**self.settings, "method": method}
        pairs = list(zip(prompts, answers if answers is not None else [None] * len(prompts)))
        keys = [self.cache.key({"conversation": p, "answer": a}, settings) for p, a in pairs]

        def make(todo: list[int]) -> list[float]:
            args = [[prompts[i] for i in todo]] + ([[answers[i] for i in todo]] if answers is not None else [])
            return [float(x) for x in getattr(self.inner, method)(*args)]

        out, reused = self.cache._through(keys, range(len(pairs)), make)
        self.reused, self.scored = self.reused + reused, self.scored + len(keys) - reused
        return [float(x) for x in out]


class CachedJudge(CachedScorer):
    """A judge (`evaluator.judges`) whose scores of one release's answers come from its cache when
    it has them; any other attribute (`threshold`, `version`, `percentile`, ...) is the judge's own."""

    def __init__(self, cache: AnswerCache, judge: Any) -> None:
        super().__init__(cache, judge, {"judge": getattr(judge, "fingerprint", None) or judge.version})

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def answer_risk(self, requests: Sequence[Any], answers: Sequence[str]) -> list[float]:
        return self._cached("answer_risk", list(requests), list(answers))

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        return self._cached("request_risk", list(requests), None)


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
