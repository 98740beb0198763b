-- records/aggregate.sql: the last day of records, from Parquet files with
-- routeval's record columns (timestamp in epoch milliseconds).
SELECT
  (timestamp // 3600000) * 3600000                      AS window_start,
  slice,
  logical_model,
  route,
  reason,
  model,
  CAST(floor(score * 100) AS BIGINT)                    AS score_bin,
  CASE WHEN status = 'ok' AND ttft_ms IS NOT NULL
       THEN CAST(floor(ln(greatest(ttft_ms, 1)) / ln(1.01)) AS BIGINT)
  END                                                   AS ttft_bin,
  count(*)                                              AS requests,
  count(*) FILTER (WHERE status IN ('error', 'timeout')
    AND coalesce(finish_reason, '') <> 'client_disconnected'
    AND coalesce(reason, '') <> 'hedge-lost')           AS failures,
  sum(cost_usd)                                         AS cost_usd
FROM read_parquet('records/*.parquet')
WHERE timestamp >= epoch_ms(now()) - 86400000
GROUP BY ALL;
