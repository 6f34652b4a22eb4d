"""How often the streamed-answer check withdraws a safe answer, and catches an unsafe one, per check schedule.

    python bench/guard_checkpoints.py [--out bench/results/guard-checkpoints.json]

The serving guard judges a streamed answer at checkpoints and withdraws it at the first prefix whose
answer risk reaches the judge's cut (chosen on whole answers). This replays that on the labelled safety
set's held-out SmolLM2 answers (greedy, 128 tokens, as `tools/data/make_safety_set.py` made them): safe
answers to harmless requests (the over-refusal side) and answers read as unsafe (the catch side), under
the shipped schedule (`chat.guard.checkpoints`) and under a check at every sentence end (the first
schedule), with the shipped harmlessness judge reading each prefix under its request.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat.guard import _SENTENCE_END, CHECK_EVERY_CHARS, checkpoints  # noqa: E402


def every_sentence(answer: str) -> list[str]:
    """The first schedule: a check at each sentence end (or every CHECK_EVERY_CHARS), then the end."""
    checked, text, out = 0, "", []
    for delta in re.findall(r"\s*\S+", answer):
        text += delta
        if len(text) - checked >= CHECK_EVERY_CHARS or _SENTENCE_END.search(text, checked):
            checked = len(text)
            out.append(text)
    if text.strip() and len(text) > checked:
        out.append(text)
    return out


def wilson(k: int, n: int) -> list[float]:
    from feedback.extract.reviews import wilson as interval

    return [round(x, 3) for x in interval(k, n)[1:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=Path(".cache/test/models/smollm2-135m-instruct"))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "guard-checkpoints.json")
    args = ap.parse_args()
    from evaluator.judges.judge import load_judges
    from evaluator.judges.safety import load_safety_set

    held = [it for it in load_safety_set() if it.split == "held_out" and it.model == "smollm2"]
    groups = {"safe_to_harmless": [it for it in held if not it.request_harmful and not it.answer_unsafe],
              "unsafe": [it for it in held if it.answer_unsafe]}
    judge = load_judges(args.model_dir).harmlessness
    schedules = {"shipped": checkpoints, "every_sentence": every_sentence}
    prefixes = sorted({(it.id, p) for items in groups.values() for it in items for f in schedules.values()
                       for p in f(it.answer)})
    by_id = {it.id: it for it in held}
    risk = dict(zip(prefixes, judge.answer_risk([by_id[i].request for i, _ in prefixes], [p for _, p in prefixes])))
    out = {"threshold": judge.threshold, "judge": judge.version, "answers": {k: len(v) for k, v in groups.items()}}
    for name, f in schedules.items():
        row = {}
        for group, items in groups.items():
            stopped = sum(any(risk[(it.id, p)] >= judge.threshold for p in f(it.answer)) for it in items)
            row[group] = {"withdrawn": stopped, "share": round(stopped / len(items), 3), "ci95": wilson(stopped, len(items))}
        row["checks_per_answer"] = round(sum(len(f(it.answer)) for items in groups.values() for it in items)
                                         / sum(len(v) for v in groups.values()), 2)
        out[name] = row
    whole = {g: sum(risk[(it.id, it.answer)] >= judge.threshold if (it.id, it.answer) in risk else False for it in items)
             for g, items in groups.items()}
    out["whole_answer_only"] = whole
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
