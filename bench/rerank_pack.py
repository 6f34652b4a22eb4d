"""How small a packed cross-encoder tier can be and still decide as the full one (`rerank.pack`).

    .venv/bin/advisor extract build-reranker --out /tmp/ce        # ~25 min, 2 cores
    .venv/bin/python bench/rerank_pack.py /tmp/ce [--ranks 8 16 32 64] [--out bench/results/rerank-pack.json]

For each rank the trained reranker is packed (its difference from the packaged MiniLM, each weight
matrix's difference cut to that rank, float16) and compared with the full model on the real gold
set's dev split, which the reranker was trained on: this measures how well the packed weights
reproduce the full model, not how well either extracts. Per rank: the file's size, how often the
cross-encoder's most likely class is the same over the dev sentences, the largest log-probability
difference, and the share of dev conversations whose extracted spans (classifier mixed with the
tier, as the extractor decodes) are exactly the full tier's. The rule, fixed before any run: the
smallest rank whose spans are the full tier's on at least 99 % of dev conversations. The test
split and the unseen splits are not read.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RULE = 0.99  # share of dev conversations whose spans must be the full tier's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reranker", type=Path, help="a reranker directory as `advisor extract build-reranker` writes it")
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from _machine import cpu_model, emit

    from feedback.extract import FastConfig, FastExtractor, load_gold, predict
    from feedback.extract.rerank import DELTA_NAME, Reranker, fidelity, pack, pair
    from feedback.extract.train_classifier import REAL_GOLD, examples

    dev = load_gold(REAL_GOLD, split="dev")
    reader = FastExtractor(FastConfig.tuned().rules_only(), use_embeddings=False)
    pairs = [pair(e.window, e.sentence) for e in examples(dev, reader)]
    full = Reranker(args.reranker)
    expected, _ = predict(FastExtractor(FastConfig.tuned(), use_embeddings=False, reranker=full), dev)
    full_bytes = sum(f.stat().st_size for f in args.reranker.glob("*.safetensors"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rank in args.ranks:
            out = Path(tmp) / f"r{rank}"
            pack(args.reranker, out, rank)
            packed = Reranker(out)
            got, _ = predict(FastExtractor(FastConfig.tuned(), use_embeddings=False, reranker=packed), dev)
            same = sum(got[c.id] == expected[c.id] for c in dev) / len(dev)
            rows.append({"rank": rank, "bytes": (out / DELTA_NAME).stat().st_size,
                         **fidelity(packed, full, pairs), "same_spans_share": round(same, 4)})
            print(rows[-1], flush=True)
    chosen = next((r["rank"] for r in rows if r["same_spans_share"] >= RULE), None)
    emit({"machine": cpu_model(), "reranker": full.version, "full_bytes": full_bytes,
          "dev_conversations": len(dev), "dev_sentences": len(pairs), "rule": f"smallest rank with same spans on >= {RULE:.0%} of dev",
          "ranks": rows, "chosen_rank": chosen}, args.out)


if __name__ == "__main__":
    main()
