"""The peer for benches/calibrate_tiers.rs: `routeval calibrate --tiers
small,mid,large` semantics for the predictive policy, vectorised with numpy,
reading the same Parquet file with pyarrow. Per slice: the candidate cut
values (every distinct score when there are at most GRID, else GRID
quantiles), each row's bucket, prefix sums per tier, and every pair of
ordered thresholds at once; the cheapest pair whose quality reaches the
target wins, ties to more successes, then to the lower thresholds.

Usage: python3 benches/calibrate_tiers_numpy.py FILE TARGET
Prints one JSON line: the chosen thresholds per slice.
"""

import json
import sys

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from calibrate_numpy import sha256

TIERS = ["small", "mid", "large"]
COLUMNS = ["id", "slice", "score", "cost_router"] + [f"{t}_ok" for t in TIERS] + [f"cost_{t}" for t in TIERS]
PICO = 1e12
GRID = 256


def cuts(scores):
    ordered = np.sort(scores)
    distinct = np.unique(ordered)
    if len(distinct) <= GRID:
        return distinct
    n = len(ordered)
    steps = np.arange(1, GRID + 1)
    index = np.minimum(-(-(steps * n) // (GRID + 1)), n - 1)
    return np.unique(ordered[index])


def calibrate_slice(score, ok, cost, router, target):
    n = len(score)
    cut = cuts(score)
    m = len(cut)
    bucket = np.searchsorted(cut, score, side="right") + 1
    prefix_ok = [np.concatenate(([0], np.cumsum(np.bincount(bucket, weights=o, minlength=m + 2)[1:]))) for o in ok]
    prefix_cost = [np.concatenate(([0], np.cumsum(np.bincount(bucket, weights=c, minlength=m + 2)[1:]))) for c in cost]
    prefix_ok = [p.astype(np.int64) for p in prefix_ok]
    prefix_cost = [p.astype(np.int64) for p in prefix_cost]
    first, second = np.triu_indices(m + 1)
    e1, e2 = first + 1, second + 1
    end = m + 1
    successes = prefix_ok[0][e1] + prefix_ok[1][e2] - prefix_ok[1][e1] + prefix_ok[2][end] - prefix_ok[2][e2]
    total = router + prefix_cost[0][e1] + prefix_cost[1][e2] - prefix_cost[1][e1] + prefix_cost[2][end] - prefix_cost[2][e2]
    feasible = successes / n >= target
    if not feasible.any():
        return None
    best_cost = total[feasible].min()
    tied = feasible & (total == best_cost)
    best_successes = successes[tied].max()
    tied &= successes == best_successes
    chosen = int(np.argmax(tied))
    threshold = lambda j: float(cut[j]) if j < m else "inf"
    return [threshold(first[chosen]), threshold(second[chosen])]


def main():
    path, target = sys.argv[1], float(sys.argv[2])
    digest = sha256(path)
    table = pq.read_table(path, columns=COLUMNS)
    for name in COLUMNS:
        if table[name].null_count:
            raise SystemExit(f"{path}: column {name!r} has missing values")
    if pc.count_distinct(table["id"]).as_py() != table.num_rows:
        raise SystemExit(f"{path}: duplicate id")
    score = table["score"].to_numpy()
    ok = [table[f"{t}_ok"].to_numpy(zero_copy_only=False).astype(np.int64) for t in TIERS]
    cost = [np.rint(table[f"cost_{t}"].to_numpy() * PICO).astype(np.int64) for t in TIERS]
    router = np.rint(table["cost_router"].to_numpy() * PICO).astype(np.int64)
    encoded = table["slice"].combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy()
    names = encoded.dictionary.to_pylist()
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    result = {}
    for index, name in enumerate(names):
        rows = order[bounds[index]:bounds[index + 1]]
        result[name] = calibrate_slice(
            score[rows], [o[rows] for o in ok], [c[rows] for c in cost], int(router[rows].sum()), target
        )
    print(json.dumps({"sha256": digest, "slices": result}))


if __name__ == "__main__":
    main()
