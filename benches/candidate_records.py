"""Writes N request records of a two-tier config exploring 30% (threshold
0.5, three slices, uniform scores), as serve records them, for measuring
`routeval replay candidate` on many records (docs/benchmarks.md).

Usage: python3 benches/candidate_records.py N CONFIG_SHA256 OUT.jsonl
"""

import json
import random
import sys


def main() -> None:
    count, sha256, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    share = 0.3
    draw = random.Random(1)
    slices = ["billing", "orders", "triage"]
    with open(out, "w") as records:
        for index in range(count):
            score = draw.random()
            policy = "large" if score >= 0.5 else "small"
            explored = draw.random() < share
            if explored:
                route = "small" if draw.random() < 0.5 else "large"
            else:
                route = policy
            propensity = (1 - share + share / 2) if route == policy else share / 2
            record = {
                "id": f"r{index}",
                "timestamp": 1_780_000_000_000 + index,
                "slice": slices[index % 3],
                "route": route,
                "decided_route": route,
                "score": score,
                "status": "ok",
                "cost_usd": 0.001 if route == "large" else 0.0001,
                "config_version": 1,
                "config_sha256": sha256,
                "propensity": propensity,
                "draw": "explore" if explored else "policy",
            }
            records.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
