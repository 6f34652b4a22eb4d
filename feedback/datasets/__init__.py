"""Training sets from the feedback store, in TRL's conversational prompt-completion formats.

Three kinds (docs/design.md, "Training data from feedback"):
- `sft` (attribute-conditioned SFT, SteerLM): answers that went down well (liked, or followed by
  `positive` feedback), labelled with the attributes they have (`feedback.labeller`).
- `kto` (unpaired): desirable = liked or followed by `positive`; undesirable = disliked or followed
  by `aware_with_correction` / `aware_without_correction`. Class weights per TRL's guidance.
  Optionally with safety anchors, labelled answers to risky requests (`anchors`).
- `dpo` (pairs): (1) a regenerated sibling the user kept over the one(s) they left, kept meaning
  chosen with the "1 / 2" arrows or, failing that, the only sibling the conversation went on
  from; (2) rephrase chains: an answer that triggered `repeat_rephrase`, and every answer after
  it that triggered another rephrase, lose to the first later answer that went down well.

Row format (every kind):
- `prompt`: the conversation up to the answer, following `parent_id` (so the branch the answer
  is on, never a sibling's), as `{"role", "content", "attributes"}` dicts (`attributes` is None
  on history turns: only the trained turn carries a condition).
- `completion` (`chosen`, `rejected` for DPO): one assistant message whose `attributes` key holds
  the SteerLM string, and `chat_template_kwargs = {"attributes": same string}`. TRL renders the
  prompt with `add_generation_prompt=True` and these kwargs, so the attribute line belongs to
  the prompt and only the answer (with `<|end|>`) is trained — the condition is not an output.
  SFT uses the attributes the labeller reads off the answer; KTO and DPO the attributes it was
  generated with (what the model saw); a DPO pair shares the chosen answer's attributes.
- Bookkeeping columns (ids, source, categories) that the trainer drops.

Guarantees: deduplicated on everything trained on (an SFT/KTO example that occurs with both
labels is dropped as conflicting); split into train/eval by conversation with a hash of the
conversation id (stable across builds, no conversation on both sides); nothing from a user in
`forgotten_users` (their rows are deleted, but the build checks again); nothing a `SafetyFilter`
flags is ever desirable, chosen or an SFT target; only complete answers (not interrupted or
failed ones). Each build writes `train.parquet`, `eval.parquet`, `dataset_card.json` and
`dataset_card.md`.

The store is read in chunks of conversations, so memory follows the size of the output, not of
the log.
"""

from __future__ import annotations

from feedback.datasets.build import build_dataset
from feedback.datasets.card import (
    CARD_JSON,
    CARD_MD,
    DEFAULT_EVAL_FRACTION,
    EVAL_FILE,
    KINDS,
    SCHEMAS,
    TRAIN_COLUMNS,
    TRAIN_FILE,
    AcceptEverythingFilter,
    DatasetCard,
    DatasetError,
    SafetyFilter,
    copy_dataset,
    kto_class_weights,
    read_card,
    rows_sha256,
    split_of,
    write_rows,
)

__all__ = [
    "CARD_JSON", "CARD_MD", "DEFAULT_EVAL_FRACTION", "EVAL_FILE", "KINDS", "SCHEMAS", "TRAIN_COLUMNS", "TRAIN_FILE",
    "AcceptEverythingFilter", "DatasetCard", "DatasetError", "SafetyFilter", "build_dataset", "copy_dataset",
    "kto_class_weights", "read_card", "rows_sha256", "split_of", "write_rows",
]
