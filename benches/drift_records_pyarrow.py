"""The peer of `benches/drift_records.rs`: the fold `routeval drift --records`
makes, as pyarrow group-bys over the whole file: per slice and hourly
window, requests and escalations; per slice, 0.01-wide score bins; per route
and window, requests, fallbacks, failures (errors and timeouts, not a
client that left nor a cancelled hedge copy), 1%-wide first-token bins, and
cost.
Prints the number of groups so the work cannot be skipped."""

import math
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq

table = pq.read_table(
    sys.argv[1],
    columns=[
        "timestamp", "slice", "route", "reason", "score", "status", "ttft_ms", "cost_usd",
        "finish_reason",
    ],
)
hour = 3_600_000
window = pc.multiply(pc.divide(table["timestamp"], hour), hour)
escalated = pc.cast(
    pc.is_in(table["reason"], value_set=__import__("pyarrow").array(["routed-large", "escalated"])),
    "int64",
)
fallback = pc.cast(pc.starts_with(table["reason"], "fallback:"), "int64")
failed = pc.cast(
    pc.and_(
        pc.is_in(table["status"], value_set=__import__("pyarrow").array(["error", "timeout"])),
        pc.and_(
            pc.invert(pc.fill_null(pc.equal(table["finish_reason"], "client_disconnected"), False)),
            pc.invert(pc.fill_null(pc.equal(table["reason"], "hedge-lost"), False)),
        ),
    ),
    "int64",
)
score_bin = pc.cast(pc.floor(pc.multiply(table["score"], 100.0)), "int64")
ttft_bin = pc.cast(
    pc.floor(pc.divide(pc.ln(pc.max_element_wise(table["ttft_ms"], 1.0)), math.log(1.01))),
    "int64",
)
table = (
    table.append_column("window", window)
    .append_column("escalated", escalated)
    .append_column("fallback", fallback)
    .append_column("failed", failed)
    .append_column("score_bin", score_bin)
    .append_column("ttft_bin", ttft_bin)
)
groups = 0
groups += table.group_by(["slice", "window"]).aggregate([("escalated", "sum"), ("escalated", "count")]).num_rows
groups += table.group_by(["slice", "score_bin"]).aggregate([("score_bin", "count")]).num_rows
groups += table.group_by(["route", "window", "ttft_bin"]).aggregate([("ttft_bin", "count")]).num_rows
groups += table.group_by(["route", "window"]).aggregate([("fallback", "sum"), ("failed", "sum"), ("cost_usd", "sum")]).num_rows
print(groups)
