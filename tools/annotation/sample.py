"""Draw the conversations of the real gold set from the HH-RLHF test splits (rows 1000 and above only).

    python tools/annotation/sample.py [--data ../shared/data/hh-rlhf] [--out DIR]
    python tools/annotation/sample.py --extra 240 --seed 1402 --out DIR   # more, the train split (below)
    python tools/annotation/sample.py --generalisation 150               # the generalisation split (below)
    python tools/annotation/sample.py --records records/extra_round_1406.jsonl --split round-1406 --gold OUT.jsonl

Writes five batches of 66 conversations (at least three user turns, the part the chosen and rejected
transcripts share, which ends with the last human turn) and the 60-conversation blind batch (the
first 12 of each batch) that a second annotator labels for the agreement figures. Seeded: it draws
the same 330 conversations every time.

`--extra N --seed S` draws N more in six batches, in the same subset proportions, none of them
already in the gold file. They are annotated once and form the `train` split: training data for
the fast extractor, never used to choose its settings or to report a figure, so dev and test stay
the adjudicated conversations they were. Four rounds were drawn, each after the
previous one was merged into the gold file: `--extra 240` with `--seed 1402`, 1403, 1404, then 1405.

`--generalisation N` draws N conversations (seed 1500 unless `--seed` says otherwise) that no round
has touched: none in the gold file, the templated dev gold, or any record of an annotation round
(`records/*.jsonl`, the fifth round that stayed out of the gold file included). They go unlabelled
to `feedback/data/generalisation_unlabelled.jsonl` (the gold file's format with `split:
"generalisation"` and `feedback: []`) and in three batches to `--batches` for blind annotators: a
split the extractor was never fitted or tuned on, to measure how its precision generalises. A subset
with too few conversations left is dropped and the others keep their proportions (helpful-online's
57 candidates were all used by earlier rounds, so `--generalisation 150` draws 50 harmless-base,
48 helpful-base and 52 helpful-rejection-sampled).

`--records FILE --split NAME --gold OUT` writes an annotation round's records as a gold file (each
conversation rebuilt from its HH row as the draw built it, the round's labels, `split: NAME`), so a
round kept out of the gold file can be scored with `advisor extract eval --gold OUT`.
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


def scaled_quotas(n, subsets=tuple(QUOTA)):
    """N conversations in the subset proportions of the first draw (the remainder to harmless-base)."""
    total = sum(QUOTA[s] for s in subsets)
    quotas = {s: round(QUOTA[s] * n / total) for s in subsets}
    quotas["harmless-base"] += n - sum(quotas.values())
    return quotas


def available_quotas(data, n, exclude):
    """`scaled_quotas`, less the subsets with too few conversations left (helpful-online is small)."""
    left = {s: sum(f"hh/{s}/{row}" not in exclude for row, _ in candidates(Path(data) / s / "test.jsonl.gz"))
            for s in QUOTA}
    subsets = list(QUOTA)
    while any(q > left[s] for s, q in scaled_quotas(n, subsets).items()):
        subsets = [s for s, q in scaled_quotas(n, subsets).items() if q <= left[s]]
    return scaled_quotas(n, subsets)


def ids_in(path):
    return {json.loads(line)["id"] for line in open(path) if line.strip()}


def used_ids():
    """Every conversation id already annotated or drawn for annotation: gold files and round records."""
    data = ROOT / "feedback" / "data"
    used = ids_in(data / "hh_gold.jsonl") | ids_in(data / "dev_gold.jsonl")
    for record in sorted((ROOT / "tools" / "annotation" / "records").glob("*.jsonl")):
        used |= ids_in(record)
    return used


def write_jsonl(path, convs):
    with open(path, "w") as f:
        f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in convs)


def generalisation(args):
    seed = 1500 if args.seed is None else args.seed
    used = used_ids()
    quotas = available_quotas(args.data, args.generalisation, used)
    convs = [{"id": c["id"], "split": "generalisation", "source": c["source"], "messages": c["messages"],
              "feedback": []} for c in draw(args.data, quotas, seed, used)]
    write_jsonl(ROOT / "feedback" / "data" / "generalisation_unlabelled.jsonl", convs)
    out = Path(args.batches)
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(convs) // 3)
    for b in range(3):
        write_jsonl(out / f"gen_batch_{b + 1}.jsonl", convs[b * size:(b + 1) * size])
    print(f"{len(convs)} unlabelled conversations (seed {seed}, {quotas}); batches in {out}")


def records_as_gold(args):
    """Each record's conversation rebuilt as the draw built it (each subset's file read once)."""
    records = [json.loads(line) for line in open(args.records) if line.strip()]
    subsets = {r["id"].split("/")[1] for r in records}
    rows = {s: dict(candidates(Path(args.data) / s / "test.jsonl.gz")) for s in subsets}
    convs = []
    for r in records:
        _, subset, row = r["id"].split("/")
        if int(row) not in rows[subset]:
            raise SystemExit(f"{r['id']}: no such conversation among the draw's candidates (row < 1000, or too short?)")
        convs.append({"id": r["id"], "source": {"dataset": "Anthropic/hh-rlhf", "subset": subset, "row": int(row)},
                      "messages": rows[subset][int(row)], "split": args.split, "feedback": r["feedback"]})
    write_jsonl(Path(args.gold), convs)
    print(f"{len(convs)} conversations, {sum(len(c['feedback']) for c in convs)} spans -> {args.gold}")


def extra(args):
    used = ids_in(ROOT / "feedback" / "data" / "hh_gold.jsonl")
    quotas = scaled_quotas(args.extra)
    convs = draw(args.data, quotas, 1402 if args.seed is None else args.seed, used)
    out = Path(args.out) / "batches"
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(convs) // 6)
    for b in range(6):
        with open(out / f"extra_{args.seed or 1402}_{b + 1}.jsonl", "w") as f:
            f.writelines(json.dumps(c, ensure_ascii=False) + "\n" for c in convs[b * size:(b + 1) * size])
    print(f"{len(convs)} more conversations in {out} ({quotas})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "hh-rlhf"))
    ap.add_argument("--out", default="annotation")
    ap.add_argument("--extra", type=int, default=0, help="draw this many more conversations (train split)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the seed of an --extra draw (default 1402) or a --generalisation draw (default 1500)")
    ap.add_argument("--generalisation", type=int, default=0,
                    help="draw this many conversations no annotation round has touched (unlabelled)")
    ap.add_argument("--batches", default="/tmp/annot", help="where the --generalisation batches go")
    ap.add_argument("--records", default=None, help="an annotation round's records, to write as a gold file")
    ap.add_argument("--split", default="records", help="the split name a --records gold file gets")
    ap.add_argument("--gold", default=None, help="where a --records gold file goes")
    args = ap.parse_args()
    if args.records:
        return records_as_gold(args)
    if args.generalisation:
        return generalisation(args)
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
