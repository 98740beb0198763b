//! Hedged requests, replayed from request records: after a request has
//! waited `delay` (a quantile of the route's first-token times) without a
//! first token, a second copy is sent; the user gets whichever first token
//! comes first. The copy's first token is another recorded request's of the
//! same prompt-length bucket (long prompts are slow for both copies), drawn
//! deterministically. Both copies pay their input tokens; without
//! cancellation the loser also runs to its end and pays its output.

use crate::schema::InputError;
use crate::schema::{HEDGE_SCHEMA_VERSION, HedgeDocument, HedgeRow};
use crate::stats::percentile;
use crate::stats::random::splitmix64;

/// One recorded request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeRequest {
    pub ttft_ms: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Prompt-length buckets: upper bounds in input tokens (the last open).
pub const BUCKETS: [(&str, u64); 4] = [
    ("<1k", 1_000),
    ("1k-4k", 4_000),
    ("4k-16k", 16_000),
    (">=16k", u64::MAX),
];

fn bucket_of(input_tokens: u64) -> usize {
    BUCKETS
        .iter()
        .position(|(_, bound)| input_tokens < *bound)
        .unwrap_or(BUCKETS.len() - 1)
}

pub const HEDGE_QUANTILES: [f64; 5] = [0.5, 0.75, 0.9, 0.95, 0.99];

fn quantile(sorted: &[f64], q: f64) -> f64 {
    percentile(sorted, q).unwrap_or(0.0)
}

/// Every delay quantile, on every bucket and on all requests.
pub fn replay_hedge(requests: &[HedgeRequest], seed: u64) -> Vec<HedgeRow> {
    let mut overall: Vec<f64> = requests.iter().map(|request| request.ttft_ms).collect();
    overall.sort_by(f64::total_cmp);
    let mut by_bucket: Vec<Vec<usize>> = vec![Vec::new(); BUCKETS.len()];
    for (index, request) in requests.iter().enumerate() {
        by_bucket[bucket_of(request.input_tokens)].push(index);
    }
    let mut rows = Vec::new();
    for &q in &HEDGE_QUANTILES {
        let delay = quantile(&overall, q);
        let all: Vec<usize> = (0..requests.len()).collect();
        let groups = std::iter::once(("all", &all)).chain(
            BUCKETS
                .iter()
                .zip(&by_bucket)
                .filter(|(_, members)| !members.is_empty())
                .map(|((name, _), members)| (*name, members)),
        );
        for (name, members) in groups {
            rows.push(hedge_row(
                requests, &by_bucket, members, q, delay, name, seed,
            ));
        }
    }
    rows
}

fn hedge_row(
    requests: &[HedgeRequest],
    by_bucket: &[Vec<usize>],
    members: &[usize],
    q: f64,
    delay: f64,
    name: &str,
    seed: u64,
) -> HedgeRow {
    let mut before = Vec::with_capacity(members.len());
    let mut after = Vec::with_capacity(members.len());
    let (mut hedged, mut extra_input, mut extra_output, mut input) = (0u64, 0u64, 0u64, 0u64);
    for &index in members {
        let request = requests[index];
        input += request.input_tokens;
        before.push(request.ttft_ms);
        if request.ttft_ms <= delay {
            after.push(request.ttft_ms);
            continue;
        }
        hedged += 1;
        // The copy: another request of the same prompt length, as recorded.
        let peers = &by_bucket[bucket_of(request.input_tokens)];
        let draw = splitmix64(seed ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
        let copy = requests[peers[(draw % peers.len() as u64) as usize]];
        let copy_first = delay + copy.ttft_ms;
        after.push(request.ttft_ms.min(copy_first));
        extra_input += request.input_tokens;
        extra_output += if copy_first < request.ttft_ms {
            request.output_tokens
        } else {
            copy.output_tokens
        };
    }
    before.sort_by(f64::total_cmp);
    after.sort_by(f64::total_cmp);
    let pair = |q: f64| [quantile(&before, q), quantile(&after, q)];
    let p95 = pair(0.95);
    HedgeRow {
        delay_quantile: q,
        delay_ms: delay,
        bucket: name.to_owned(),
        requests: members.len() as u64,
        hedged,
        p50_ttft_ms: pair(0.5),
        p95_ttft_ms: p95,
        p99_ttft_ms: pair(0.99),
        extra_input_tokens: extra_input,
        extra_input_share: if input == 0 {
            0.0
        } else {
            extra_input as f64 / input as f64
        },
        extra_output_tokens_uncancelled: extra_output,
        p95_ms_saved_per_k_extra_input: (extra_input > 0)
            .then(|| (p95[0] - p95[1]) / (extra_input as f64 / 1000.0)),
    }
}

/// The records at `path` (of `route`, or all) with a first token.
pub fn load_hedge_requests(
    path: &std::path::Path,
    route: Option<&str>,
) -> Result<(Vec<HedgeRequest>, u64), crate::schema::InputError> {
    use crate::records::{FieldNames, Status, for_each_record};
    let mut requests = Vec::new();
    // Every sum the replay makes is at most these: if they fit, none wraps.
    let (mut all_input, mut all_output) = (0u64, 0u64);
    let rows = for_each_record(path, &FieldNames::default(), |location, record| {
        if route.is_some_and(|route| route != record.route) || record.status != Status::Ok {
            return Ok(());
        }
        let invalid = |field: &str, problem: &str| InputError::Invalid {
            path: path.to_owned(),
            location,
            field: field.to_owned(),
            problem: problem.to_owned(),
        };
        let missing = |field: &str| {
            invalid(
                field,
                "missing: the hedging replay needs it on every answered request",
            )
        };
        let request = HedgeRequest {
            ttft_ms: record.ttft_ms.ok_or_else(|| missing("ttft_ms"))?,
            input_tokens: record.input_tokens.ok_or_else(|| missing("input_tokens"))?,
            output_tokens: record.output_tokens.unwrap_or(0),
        };
        let past = "the records' tokens add up past 2^64: they are not token counts";
        all_input = all_input
            .checked_add(request.input_tokens)
            .ok_or_else(|| invalid("input_tokens", past))?;
        all_output = all_output
            .checked_add(request.output_tokens)
            .ok_or_else(|| invalid("output_tokens", past))?;
        requests.push(request);
        Ok(())
    })?;
    if requests.is_empty() {
        return Err(InputError::Unreadable {
            path: path.to_owned(),
            message: match route {
                Some(route) => format!("no answered records of the route {route:?} (--route)"),
                None => "no answered records".to_owned(),
            },
        });
    }
    Ok((requests, rows))
}

pub fn render_hedge(document: &HedgeDocument) -> String {
    let (header, rows) = document.table();
    let table = crate::terminal::table(header, rows);
    format!(
        "{}: hedged copies after each delay, {}\n{}\n",
        document.records.path,
        document.route.as_deref().map_or_else(
            || "every route".to_owned(),
            |route| format!("route {route}")
        ),
        table
    )
}

/// A hedging replay: the records, the route replayed (all when `None`), and
/// the seed of the copies' draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HedgeOptions {
    pub records: std::path::PathBuf,
    pub route: Option<String>,
    pub seed: u64,
}

/// Every delay quantile replayed over the records, as a document.
pub fn hedge(options: &HedgeOptions) -> anyhow::Result<HedgeDocument> {
    let (requests, rows) = load_hedge_requests(&options.records, options.route.as_deref())?;
    Ok(HedgeDocument {
        schema_version: HEDGE_SCHEMA_VERSION,
        kind: "hedge".to_owned(),
        records: crate::schema::InputFile::of_file(&options.records, rows)?,
        route: options.route.clone(),
        seed: options.seed,
        rows: replay_hedge(&requests, options.seed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hedging_cuts_the_tail_of_short_prompts_and_costs_long_ones_more() {
        // Short prompts: mostly fast, a tenth stuck at 5 s. Long prompts:
        // slow for every copy (prefill), so a copy rarely wins.
        let mut requests = Vec::new();
        for index in 0..1000 {
            for copy in 0..3 {
                let stuck = (3 * index + copy) % 10 == 0;
                requests.push(HedgeRequest {
                    ttft_ms: if stuck {
                        5000.0
                    } else {
                        200.0 + f64::from(index % 7)
                    },
                    input_tokens: 300,
                    output_tokens: 200,
                });
            }
            requests.push(HedgeRequest {
                ttft_ms: 3000.0 + f64::from(index % 13) * 10.0,
                input_tokens: 20_000,
                output_tokens: 200,
            });
        }
        let rows = replay_hedge(&requests, 7);
        let at = |q: f64, bucket: &str| {
            rows.iter()
                .find(|row| row.delay_quantile == q && row.bucket == bucket)
                .unwrap()
        };
        let short = at(0.5, "<1k");
        assert!(
            short.p95_ttft_ms[1] < short.p95_ttft_ms[0] / 2.0,
            "{short:?}"
        );
        let long = at(0.5, ">=16k");
        assert!(long.extra_input_tokens > 10 * short.extra_input_tokens);
        assert!(
            long.p95_ms_saved_per_k_extra_input.unwrap()
                < short.p95_ms_saved_per_k_extra_input.unwrap()
        );
        // Nobody waits longer than without the hedge.
        for row in &rows {
            assert!(row.p99_ttft_ms[1] <= row.p99_ttft_ms[0]);
        }
    }
}
