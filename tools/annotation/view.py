"""Print conversations of a batch with message indices: python3 view.py BATCH [START [COUNT]]"""
import json, sys
path = sys.argv[1]; start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
count = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
rows = [json.loads(l) for l in open(path)]
for n, c in enumerate(rows[start:start + count], start=start):
    print(f"=== [{n}] {c['id']}")
    for i, m in enumerate(c["messages"]):
        print(f"  ({i}) {m['role'].upper()}: {m['content']}")
    print()
