"""Draw the conversations of the real gold set from the HH-RLHF test splits (rows 1000 and above only).

    python tools/annotation/sample.py [--data ../shared/data/hh-rlhf] [--out DIR]
    python tools/annotation/sample.py --extra 240 --seed 1402 --out DIR   # more, the train split (below)

Writes five batches of 66 conversations (at least three user turns, the part the chosen and rejected
transcripts share, which ends with the last human turn) and the 60-conversation blind batch (the
first 12 of each batch) that a second annotator labels for the agreement figures. Seeded: it draws
the same 330 conversations every time.

`--extra N --seed S` draws N more in six batches, in the same subset proportions, none of them
already in the gold file. They are annotated once and form the `train` split: training data for
the fast extractor, never used to choose its settings or to report a figure, so dev and test stay
the adjudicated conversations they were. Four rounds were drawn, each after the
previous one was merged into the gold file: `--extra 240` with `--seed 1402`, 1403, 1404, then 1405.
"""
import argparse
import gzip
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from evaluator.hh_data import _ROLE, _TURN, RESERVED_BELOW  # noqa: E402

QUOTA = {"harmless-base": 105, "helpful-base": 102, "helpful-online": 12, "helpful-rejection-sampled": 111}


def parse(text):
    parts = _TURN.split(text)
    return [{"role": _ROLE[parts[i]], "content": parts[i + 1].strip()} for i in range(1, len(parts) - 1, 2)]


def candidates(path):
    for i, line in enumerate(gzip.open(path, "rt")):
        if i < RESERVED_BELOW:  # reserved for an evaluation the project does not see
            continue
        chosen = json.loads(line)["chosen"]
        msgs = parse(chosen[:chosen.rfind("\n\nAssistant:")])
        alternating = all(msgs[j]["role"] != msgs[j + 1]["role"] for j in range(len(msgs) - 1))
        if sum(m["role"] == "user" for m in msgs) >= 3 and msgs[-1]["role"] == "user" and alternating \
                and all(m["content"] for m in msgs):
            yield i, msgs


def draw(data, quotas, seed, exclude=frozenset()):
    rng, convs = random.Random(seed), []
    for subset, quota in quotas.items():
        pool = [(row, msgs) for row, msgs in candidates(Path(data) / subset / "test.jsonl.gz")
                if f"hh/{subset}/{row}" not in exclude]
        for row, msgs in rng.sample(pool, quota):
            convs.append({"id": f"hh/{subset}/{row}",
                          "source": {"dataset": "Anthropic/hh-rlhf", "subset": subset, "row": row}, "messages": msgs})
    rng.shuffle(convs)
    return convs


def extra(args):
    gold = ROOT / "feedback" / "data" / "hh_gold.jsonl"
    used = {json.loads(line)["id"] for line in open(gold)}
    total = sum(QUOTA.values())
    quotas = {s: round(q * args.extra / total) for s, q in QUOTA.items()}
    quotas["harmless-base"] += args.extra - sum(quotas.values())
    convs = draw(args.data, quotas, args.seed, used)
    out = Path(args.out) / "batches"
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(convs) // 6)
    for b in range(6):
        with open(out / f"extra_{args.seed}_{b + 1}.jsonl", "w") as f:
            f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in convs[b * size:(b + 1) * size])
    print(f"{len(convs)} more conversations in {out} ({quotas})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "hh-rlhf"))
    ap.add_argument("--out", default="annotation")
    ap.add_argument("--extra", type=int, default=0, help="draw this many more conversations (train split)")
    ap.add_argument("--seed", type=int, default=1402, help="the seed of an --extra draw")
    args = ap.parse_args()
    if args.extra:
        return extra(args)
    convs = draw(args.data, QUOTA, 14)
    out = Path(args.out)
    (out / "batches").mkdir(parents=True, exist_ok=True)
    for b in range(5):
        with open(out / "batches" / f"batch_{b + 1}.jsonl", "w") as f:
            f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in convs[b * 66:(b + 1) * 66])
    with open(out / "blind_batch.jsonl", "w") as f:
        f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for b in range(5) for c in convs[b * 66:b * 66 + 12])
    print(f"{len(convs)} conversations in {out}")


if __name__ == "__main__":
    main()
