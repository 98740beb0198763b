"""The peer for benches/calibrate.rs: `routeval calibrate` semantics for the
predictive policy, vectorised with numpy, reading the same Parquet file with
pyarrow. It validates what routeval validates, hashes the file, and computes
per slice the chosen threshold, the baselines and the Pareto frontier.

Usage: python3 benches/calibrate_numpy.py FILE TARGET
Prints one JSON line: chosen thresholds per slice, and its own peak RSS.
"""

import hashlib
import json
import resource
import sys

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

COLUMNS = ["id", "slice", "score", "small_ok", "large_ok", "cost_small", "cost_large",
           "cost_verifier", "cost_router"]
PICO = 1e12


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pico(column):
    return np.rint(column.to_numpy() * PICO).astype(np.int64)


def calibrate(path, target):
    table = pq.read_table(path, columns=COLUMNS)
    for name in COLUMNS:
        if table[name].null_count:
            raise SystemExit(f"{path}: column {name!r} has missing values")
    if pc.count_distinct(table["id"]).as_py() != table.num_rows:
        raise SystemExit(f"{path}: duplicate id")
    score = table["score"].to_numpy()
    if not np.isfinite(score).all():
        raise SystemExit(f"{path}: non-finite score")
    costs = {name: table[name].to_numpy() for name in COLUMNS[5:]}
    for name, values in costs.items():
        if not ((values >= 0) & (values <= 1e6)).all():
            raise SystemExit(f"{path}: cost out of range in {name!r}")
    encoded = table["slice"].combine_chunks().dictionary_encode()
    codes = encoded.indices.to_numpy()
    names = encoded.dictionary.to_pylist()
    small = table["small_ok"].to_numpy(zero_copy_only=False).astype(np.int64)
    large = table["large_ok"].to_numpy(zero_copy_only=False).astype(np.int64)
    cost_small = np.rint(costs["cost_small"] * PICO).astype(np.int64)
    cost_large = np.rint(costs["cost_large"] * PICO).astype(np.int64)
    cost_router = np.rint(costs["cost_router"] * PICO).astype(np.int64)
    slices = len(names)

    rows = np.bincount(codes, minlength=slices)
    small_total = np.bincount(codes, weights=small, minlength=slices).astype(np.int64)
    large_total = np.bincount(codes, weights=large, minlength=slices).astype(np.int64)
    base_total = np.bincount(codes, weights=cost_router + cost_small, minlength=slices)
    small_cost_total = np.bincount(codes, weights=cost_small, minlength=slices)
    large_cost_total = np.bincount(codes, weights=cost_large, minlength=slices)

    # By slice, then by descending score: a stable sort by score, then a
    # stable (radix, for small integer codes) sort by slice, which numpy does
    # faster than lexsort.
    codes = codes.astype(np.uint8 if slices <= 256 else np.uint32)
    order = np.argsort(-score, kind="stable")
    order = order[np.argsort(codes[order], kind="stable")]
    sorted_codes = codes[order]
    sorted_score = score[order]
    gain = (large - small)[order]
    extra = (cost_large - cost_small)[order]
    starts = np.concatenate(([0], np.cumsum(rows)[:-1]))
    cum_gain = np.cumsum(gain)
    cum_extra = np.cumsum(extra)
    before = np.concatenate(([0], cum_gain))[starts]
    before_extra = np.concatenate(([0], cum_extra))[starts]
    # A candidate ends each run of equal (slice, score).
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (sorted_codes[1:] != sorted_codes[:-1]) | (sorted_score[1:] != sorted_score[:-1])
    cand_slice = sorted_codes[last]
    cand_threshold = sorted_score[last]
    cand_success = small_total[cand_slice] + cum_gain[last] - before[cand_slice]
    cand_cost = base_total[cand_slice] + cum_extra[last] - before_extra[cand_slice]
    # Plus +inf (escalate none) as each slice's last candidate, keeping the
    # candidates grouped by slice.
    ends = np.searchsorted(cand_slice, np.arange(slices), side="right")
    cand_slice = np.insert(cand_slice, ends, np.arange(slices))
    cand_threshold = np.insert(cand_threshold, ends, np.inf)
    cand_success = np.insert(cand_success, ends, small_total)
    cand_cost = np.insert(cand_cost, ends, base_total.astype(np.int64))
    first_candidate = np.searchsorted(cand_slice, np.arange(slices))

    # Per slice: the cheapest feasible candidate, then the most successes,
    # then the lowest threshold, each a segmented reduction.
    n = rows[cand_slice]
    feasible = cand_success / n >= target
    huge = np.iinfo(np.int64).max
    cost_if_feasible = np.where(feasible, cand_cost, huge)
    best_cost = np.minimum.reduceat(cost_if_feasible, first_candidate)
    tied = feasible & (cand_cost == best_cost[cand_slice])
    best_success = np.maximum.reduceat(np.where(tied, cand_success, -1), first_candidate)
    tied &= cand_success == best_success[cand_slice]
    best_threshold = np.minimum.reduceat(np.where(tied, cand_threshold, np.inf), first_candidate)
    any_feasible = best_cost != huge

    # Pareto frontier: by slice, cost ascending, successes descending; keep
    # points that beat every cheaper one in the slice.
    frontier_order = np.argsort(-cand_success, kind="stable")
    frontier_order = frontier_order[np.argsort(cand_cost[frontier_order], kind="stable")]
    frontier_order = frontier_order[np.argsort(cand_slice[frontier_order], kind="stable")]
    key = cand_slice[frontier_order] * (rows.max() + 2) + cand_success[frontier_order]
    running = np.maximum.accumulate(key)
    on_frontier = np.ones(len(key), dtype=bool)
    on_frontier[1:] = key[1:] > running[:-1]
    frontier_sizes = np.bincount(cand_slice[frontier_order][on_frontier], minlength=slices)

    result = {}
    for slice_index, name in enumerate(names):
        n_slice = rows[slice_index]
        ok = bool(any_feasible[slice_index])
        result[name] = {
            "feasible": ok,
            "threshold": float(best_threshold[slice_index]) if ok else None,
            "quality": best_success[slice_index] / n_slice if ok else None,
            "mean_cost": best_cost[slice_index] / PICO / n_slice if ok else None,
            "always_small": [small_total[slice_index] / n_slice, small_cost_total[slice_index] / PICO / n_slice],
            "always_large": [large_total[slice_index] / n_slice, large_cost_total[slice_index] / PICO / n_slice],
            "frontier_points": int(frontier_sizes[slice_index]),
        }
    return result


def main():
    path, target = sys.argv[1], float(sys.argv[2])
    digest = sha256(path)
    result = calibrate(path, target)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"sha256": digest, "slices": result, "peak_rss_kib": peak_kib}))


if __name__ == "__main__":
    main()
