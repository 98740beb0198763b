"""The DuckDB peer of `benches/drift_records.rs`: the fold `routeval drift
--records` makes, as the four SQL group-bys of the pyarrow peer
(`drift_records_pyarrow.py`) over the same Parquet file: per slice and
hourly window, requests and escalations; per slice, 0.01-wide score bins;
per route, window and 1%-wide first-token bin, answered requests; per route
and window, fallbacks, failures (errors and timeouts, not a
client that left nor a cancelled hedge copy) and cost. Prints the number of groups (so the work
cannot be skipped) and the query time in seconds, which excludes starting
Python and importing DuckDB."""

import sys
import time

import duckdb

path = sys.argv[1].replace("'", "''")
connection = duckdb.connect()
start = time.perf_counter()
connection.execute(
    f"""
    CREATE TEMP VIEW records AS
    SELECT (timestamp // 3600000) * 3600000 AS window_start, slice, route, reason, score,
           CASE WHEN status = 'ok' THEN ttft_ms END AS ttft_ms, cost_usd,
           CASE WHEN status IN ('error', 'timeout')
                 AND coalesce(finish_reason, '') <> 'client_disconnected'
                 AND coalesce(reason, '') <> 'hedge-lost' THEN 1 ELSE 0 END AS failed
    FROM read_parquet('{path}')
    """
)
queries = [
    """SELECT slice, window_start, count(*), sum(CASE WHEN reason IN ('routed-large', 'escalated')
       THEN 1 ELSE 0 END) FROM records GROUP BY ALL""",
    "SELECT slice, CAST(floor(score * 100) AS BIGINT) AS bin, count(*) FROM records GROUP BY ALL",
    """SELECT route, window_start, CAST(floor(ln(greatest(ttft_ms, 1)) / ln(1.01)) AS BIGINT) AS bin,
       count(*) FROM records WHERE ttft_ms IS NOT NULL GROUP BY ALL""",
    """SELECT route, window_start, sum(CASE WHEN starts_with(reason, 'fallback:') THEN 1 ELSE 0 END),
       sum(failed), sum(cost_usd) FROM records GROUP BY ALL""",
]
groups = sum(len(connection.execute(query).fetchall()) for query in queries)
print(groups, f"{time.perf_counter() - start:.4f}")
