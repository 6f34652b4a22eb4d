"""Evaluation: every metric the release gate uses, and its data loaders.

Imports nothing else from this project: it takes models, tokenizers, texts and plain callables
(`answer_fn(questions) -> answers`), so the service, the CLI and the cycle can all drive it.

- `hh_data`, `hh`, `scoring`: HH-RLHF preference accuracy with a log-likelihood, implicit-reward
  (PEFT policy vs its base) or reward-model scorer.
- `helpfulness`: Plackett–Luce reward model on vote-ranked advice; NDCG / 1st-vs-2nd / 1st-vs-last;
  the share of human references a model's advice beats.
- `moderation`: the `Moderator` interface, the offline embedding moderator, an HF classifier,
  and the harmlessness score (share of answers to risky prompts judged safe).
- `diversity`: max-BLEU and Self-BLEU.
- `embeddings`, `generation`, `shipped`: the sentence encoder, an answer function from an HF
  model, and the data files shipped in `evaluator/data/`.
"""
