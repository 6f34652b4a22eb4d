"""Write `deploy/loop/real_reactions.jsonl`: what the simulated users say, in real people's words.

Every line is a feedback span annotated in the **test** split of the real gold set
(`feedback/data/hh_gold.jsonl`, HH-RLHF rows >= 1000): the fast extractor's classifier was trained
on the train and dev splits and its settings chosen on dev only, so the simulator does not speak in words the extractor
was fitted to. The spans below were chosen by reading all 178 test spans for the ones that are
*portable*: they name nothing particular to their own conversation (no dish, person or place), so
they read naturally after any advice. Most real feedback is not portable (corrections almost
never are: "But I want to sell them, not buy them."), which is why the simulator has no real
corrections: a user who would correct says one of the complaints instead.

Each line: `{"kind", "text", "category", "source", "prefer"}` — `kind` the simulator's reaction
(thanks | complaint | clarify | reask), `category` the gold annotation, `source` the gold
conversation id, `prefer` the preference it fits when it says why the answer missed (null: any).

    python tools/data/make_real_reactions.py      # rewrites the file; fails on a span not in test
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLD = REPO / "feedback" / "data" / "hh_gold.jsonl"
OUT = REPO / "deploy" / "loop" / "real_reactions.jsonl"

# (kind, span as annotated, prefer)
CHOSEN = [
    ("thanks", "Thanks!", None),
    ("thanks", "Thank you.", None),
    ("thanks", "That makes sense.", None),
    ("thanks", "That's a good idea.", None),
    ("thanks", "That's useful, thank you.", None),
    ("thanks", "Ok, thanks for your help!", None),
    ("thanks", "Okay, I'll do that.", None),
    ("thanks", "Thanks for all the information!", None),
    ("thanks", "okay, sounds good", None),
    ("thanks", "this is good", None),
    ("thanks", "All right, I guess I could do that.", None),
    ("thanks", "Wow that's very thorough, thank you for that.", "long"),
    ("complaint", "Hmm, that one doesn't make sense", None),
    ("complaint", "All right, that was confusing.", None),
    ("complaint", "You're not incorporating what I just told you into your answer, you're just repeating what you said.", None),
    ("complaint", "My original question was very simple but your responses have been unnecessarily lengthy.", "short"),
    ("clarify", "How does it work?", None),
    ("clarify", "All right, what does that do?", None),
    ("clarify", "Will that make the process easier?", None),
    ("reask", "Okay, so what should I say?", None),
    ("reask", "so how can I go about achieving that?", None),
    ("reask", "Do you have any suggestions?", None),
    ("reask", "Do you have step by step directions?", "steps"),
]


def main() -> int:
    spans: dict[str, tuple[str, str]] = {}
    fitted_texts: set[str] = set()  # spans of the splits the classifier was fitted on
    for line in GOLD.read_text().splitlines():
        conv = json.loads(line)
        for fb in conv["feedback"]:
            if conv["split"] == "test":
                spans.setdefault(fb["span"], (fb["category"], conv["id"]))
            else:
                fitted_texts.add(fb["span"].strip().lower())
    rows = []
    for kind, text, prefer in CHOSEN:
        if text not in spans:
            print(f"not an annotated test-split span: {text!r}", file=sys.stderr)
            return 1
        category, source = spans[text]
        rows.append({"kind": kind, "text": text, "category": category, "source": source, "prefer": prefer,
                     "also_in_training": text.strip().lower() in fitted_texts})
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} reactions to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
