"""Data tests write: a conversation built turn by turn in a real store (`Chat`, through the
typed API), and HH-RLHF files in the layout `advisor eval hh` reads (`hh_dir`). Shared by the
tests of the training sets, of people's data and of the evaluator's command line."""

from __future__ import annotations

import gzip
import json

from evaluator.hh_data import SUBSETS
from store import FeedbackEvent, GenerationMeta
from store.attributes import Attributes

V1 = Attributes(verbosity=1)


class Chat:
    """Builds one conversation in the store, turn by turn, on any branch."""

    def __init__(self, store, user: str):
        self.store, self.user = store, user
        self.conv = store.conversations.create(user)
        self.id = self.conv.id

    def user_says(self, text: str, parent=None):
        return self.store.conversations.add_message(self.id, "user", text, parent_id=parent.id if parent else None)

    def answer(self, parent, text: str, attrs: Attributes = V1, status: str = "complete"):
        gen = GenerationMeta(backend="test", model="tiny", attributes=attrs)
        return self.store.conversations.add_message(self.id, "assistant", text, parent_id=parent.id, generation=gen, status=status)

    def feedback(self, user_msg, target, category: str):
        self.store.events.add([FeedbackEvent(
            conversation_id=self.id, message_id=user_msg.id, target_message_id=target.id, category=category,
            span=user_msg.content, span_start=0, span_end=len(user_msg.content),
            extractor="test", extractor_version="1",
        )])


def hh_dir(tmp_path):
    """Three rows per HH-RLHF subset under tmp_path/hh, in the layout `advisor eval hh --data` reads
    (every other subset gzipped); returns that folder."""
    for i, subset in enumerate(SUBSETS):
        rows = [{"chosen": f"\n\nHuman: question {j}?\n\nAssistant: a kind, concrete answer {j}",
                 "rejected": f"\n\nHuman: question {j}?\n\nAssistant: no"} for j in range(3)]
        path = tmp_path / "hh" / subset / ("test.jsonl.gz" if i % 2 else "test.jsonl")
        path.parent.mkdir(parents=True)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if i % 2:
            with gzip.open(path, "wt") as f:
                f.write(text)
        else:
            path.write_text(text)
    return tmp_path / "hh"
