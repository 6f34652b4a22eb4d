"""Validate an annotation file against its batch: python3 check.py BATCH OUT
OUT lines: {"id": ..., "feedback": [{"message": i, "category": c, "span": s}], "notes": "..."}"""
import json, sys
CATS = {"repeat_rephrase", "aware_with_correction", "aware_without_correction", "ask_clarification", "positive"}
batch = {c["id"]: c for c in map(json.loads, open(sys.argv[1]))}
out = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
errors, seen = [], set()
for k, r in enumerate(out, 1):
    c = batch.get(r.get("id"))
    if c is None:
        errors.append(f"line {k}: unknown id {r.get('id')!r}"); continue
    if r["id"] in seen: errors.append(f"line {k}: duplicate id {r['id']}")
    seen.add(r["id"])
    msgs = c["messages"]; first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
    for f in r.get("feedback", []):
        i, cat, span = f.get("message"), f.get("category"), f.get("span")
        if not isinstance(i, int) or not 0 <= i < len(msgs) or msgs[i]["role"] != "user":
            errors.append(f"{r['id']}: message {i!r} is not a user turn"); continue
        if i == first_user: errors.append(f"{r['id']}: message {i} is the first user turn")
        if cat not in CATS: errors.append(f"{r['id']}: bad category {cat!r}")
        if not isinstance(span, str) or not span.strip() or span not in msgs[i]["content"]:
            errors.append(f"{r['id']}: span {span!r} is not an exact substring of message {i}")
missing = [i for i in batch if i not in seen]
print(f"{len(out)} annotated, {sum(len(r.get('feedback', [])) for r in out)} spans, {len(missing)} missing")
for e in errors: print("ERROR", e)
if missing: print("MISSING", missing[:20])
sys.exit(1 if errors or missing else 0)
