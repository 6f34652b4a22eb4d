"""Text measures: how long an answer is and how hard it reads. The one home for both.

The labeller turns them into verbosity and complexity labels, the steerability axis and the
steering bench correlate them with the sliders, the simulator prefers answers by length: all must
count the same way, so they all call these two functions.

Design choices:
- Words are runs of non-space characters (`str.split()`): no tokenizer, no language model, the
  same count a reader would make of "don't" or "e-mail", and free.
- Reading grade is the Flesch–Kincaid grade of textstat (a maintained library), 0 for an empty
  or blank text (textstat would divide by zero sentences).
- textstat >= 0.7.11 counts English syllables with NLTK's CMUdict, which it downloads on first
  use. Nothing may be downloaded at run time, so the language is "en-US": the CMUdict lookup does
  not take it for English and falls back to Pyphen's en_US hyphenation dictionary (shipped with
  pyphen), which is what textstat used before CMUdict. Same formula, offline, deterministic.
- Here, in `evaluator`, because evaluator imports none of the project's packages, so every layer
  (feedback, chat, trainer, deploy, bench) may import it without a cycle.
"""

from __future__ import annotations

from functools import lru_cache


def words(text: str) -> int:
    """Number of words: runs of non-space characters."""
    return len(text.split())


@lru_cache(maxsize=1)
def _readability():
    from textstat.textstat import textstatistics

    ts = textstatistics()
    ts.set_lang("en-US")  # Pyphen syllables: offline (see the module docstring)
    return ts


def reading_grade(text: str) -> float:
    """Flesch–Kincaid grade level of `text` (textstat, offline); 0 for a blank text."""
    return float(_readability().flesch_kincaid_grade(text)) if text.strip() else 0.0
