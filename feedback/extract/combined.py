"""Run several extractors over the same windows and keep every span, labelled with its finder.

Each span keeps the name of the extractor that found it (`Span.extractor`), and each becomes its
own event (the store's uniqueness key includes the extractor), so the operator and the training
sets can tell fast from LLM findings and compare them. Stats are prefixed with the extractor name.
"""

from __future__ import annotations

from collections.abc import Sequence

from feedback.extract.types import BatchResult, Extractor, Window


class CombinedExtractor:
    def __init__(self, *extractors: Extractor):
        if not extractors:
            raise ValueError("CombinedExtractor needs at least one extractor")
        self.extractors = extractors
        self.name = "+".join(e.name for e in extractors)
        self.version = "+".join(e.version for e in extractors)
        self.versions = {e.name: e.version for e in extractors}
        self.needs_history = any(getattr(e, "needs_history", False) for e in extractors)

    def extract(self, windows: Sequence[Window]) -> BatchResult:
        out = BatchResult(spans=[[] for _ in windows])
        for extractor in self.extractors:
            result = extractor.extract(windows)
            for k, spans in enumerate(result.spans):
                out.spans[k] += spans
            for key, value in result.stats.items():
                out.stats[f"{extractor.name}:{key}"] += value
            out.errors += [f"{extractor.name}: {e}" for e in result.errors]
        for spans in out.spans:
            spans.sort(key=lambda s: (s.start, s.extractor))
        return out
