//! The replica-routing replay in the report: per policy, the prefix-cache
//! hit rate against the ceiling, TTFT, and the hit rate over time (where a
//! lost index shows as a dip and its recovery), then the calibration's
//! choice against the defaults on the held-out part.

use std::fmt::Write as _;

use super::kit::{BLUE, GREY, ORANGE, table};
use super::svg::{Chart, Series, Style, bars, escape};
use crate::markdown::{code, text};
use crate::schema::ReplayDocument;

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

pub fn replay_section(out: &mut String, replay: &ReplayDocument) {
    intro(out, replay);
    charts(out, replay);
    if let Some(loss) = replay.pool.index_loss_at_s {
        let _ = write!(
            out,
            "<p>The router lost its prefix index {:.0} minutes into the trace: affinity falls back to least load until the index refills.</p>",
            loss / 60.0
        );
    }
    policy_table(out, replay);
    if let Some(calibration) = &replay.calibration {
        calibration_section(out, calibration);
    }
}

/// What was replayed: the trace, the pool, and the cache's ceiling.
fn intro(out: &mut String, replay: &ReplayDocument) {
    let (trace, pool) = (&replay.trace, &replay.pool);
    let cache = pool.cache_blocks.map_or_else(
        || "unbounded caches".to_owned(),
        |blocks| format!("{blocks} cache blocks of {} tokens each", pool.block_tokens),
    );
    let _ = write!(
        out,
        "<h2>Replica routing: replay of <code>{}</code></h2><p>{} requests over {:.0} s{} through {} replicas ({}), prefill {} tokens/s, decode {} ms/token, batches of {}, load scraped every {} ms. One replica holding every cache would serve {:.1}% of prompt tokens from cache{}.</p>",
        escape(&trace.path),
        trace.requests,
        trace.duration_s,
        if pool.speedup == 1.0 {
            String::new()
        } else {
            format!(", replayed {}x faster", pool.speedup)
        },
        pool.replicas,
        escape(&cache),
        pool.prefill_tokens_per_s,
        pool.decode_ms_per_token,
        pool.max_batch,
        pool.scrape_ms,
        trace.ceiling_hit_rate * 100.0,
        if pool.cache_blocks.is_none() {
            ": with unbounded caches no routing can do better"
        } else {
            ""
        }
    );
}

/// Hit rates and first tokens per policy, and the hit rate over time.
fn charts(out: &mut String, replay: &ReplayDocument) {
    let trace = &replay.trace;
    out.push_str("<div class=\"charts\">");
    let hit_rates: Vec<(String, Vec<(f64, &'static str)>)> = replay
        .policies
        .iter()
        .map(|policy| (policy.name.clone(), vec![(policy.hit_rate * 100.0, BLUE)]))
        .collect();
    out.push_str(&bars(
        "Prompt tokens served from cache",
        "% of prompt tokens",
        &hit_rates,
        &[(trace.ceiling_hit_rate * 100.0, "ceiling")],
    ));
    let latencies: Vec<(String, Vec<(f64, &'static str)>)> = replay
        .policies
        .iter()
        .map(|policy| {
            (
                policy.name.clone(),
                vec![(policy.ttft_ms.p95, ORANGE), (policy.ttft_ms.p50, GREY)],
            )
        })
        .collect();
    out.push_str(&bars(
        "Time to first token: p95 (orange) and p50 (grey)",
        "ms",
        &latencies,
        &[],
    ));
    // One legend row holds about five names: the four best hit rates and
    // the worst, in the table's order; the table has them all.
    let mut ranked: Vec<usize> = (0..replay.policies.len()).collect();
    ranked.sort_by(|&a, &b| {
        replay.policies[b]
            .hit_rate
            .total_cmp(&replay.policies[a].hit_rate)
    });
    let mut shown: Vec<usize> = ranked
        .iter()
        .take(4)
        .chain(ranked.last())
        .copied()
        .collect();
    shown.sort_unstable();
    shown.dedup();
    let timeline = Chart {
        title: if shown.len() < replay.policies.len() {
            format!(
                "Hit rate over time ({} of {} policies)",
                shown.len(),
                replay.policies.len()
            )
        } else {
            "Hit rate over time".to_owned()
        },
        x_label: "minutes into the trace".to_owned(),
        y_label: "% of prompt tokens from cache".to_owned(),
        series: shown
            .iter()
            .map(|&index| (&replay.policies[index], PALETTE[index % PALETTE.len()]))
            .map(|(policy, color)| Series {
                name: policy.name.clone(),
                color,
                style: Style::Line,
                points: policy
                    .windows
                    .iter()
                    .filter(|window| window.requests > 0)
                    .map(|window| (window.start_s / 60.0, window.hit_rate * 100.0))
                    .collect(),
            })
            .collect(),
        markers: Vec::new(),
        rules: Vec::new(),
        arrows: Vec::new(),
        verticals: Vec::new(),
    };
    out.push_str(&timeline.to_svg());
    out.push_str("</div>");
}

/// Every policy's figures.
fn policy_table(out: &mut String, replay: &ReplayDocument) {
    table(
        out,
        &[
            "policy",
            "hit rate",
            "prefill tokens",
            "TTFT p50 ms",
            "p95",
            "p99",
            "queue p50 ms",
            "p95",
            "imbalance",
            "herding s",
            "index drift misses",
        ],
        replay.policies.iter().map(|policy| {
            vec![
                policy.name.clone(),
                format!("{:.1}%", policy.hit_rate * 100.0),
                policy.prefill_tokens.to_string(),
                format!("{:.0}", policy.ttft_ms.p50),
                format!("{:.0}", policy.ttft_ms.p95),
                format!("{:.0}", policy.ttft_ms.p99),
                format!("{:.0}", policy.queue_ms.p50),
                format!("{:.0}", policy.queue_ms.p95),
                format!("{:.2}", policy.imbalance),
                format!("{:.0}", policy.herding_s),
                policy.index_drift_misses.to_string(),
            ]
        }),
    );
}

/// The calibrated routers against the defaults and the fixed policies.
fn calibration_section(out: &mut String, calibration: &crate::schema::replay::Calibration) {
    let _ = write!(
        out,
        "<h3>Calibrated for {}</h3><p>Searched on the first {} requests ({} grid points), checked on the {} after them.</p>",
        escape(&calibration.objective),
        calibration.train_requests,
        calibration.grid.points,
        calibration.holdout_requests
    );
    let chosen = [&calibration.cache_aware, &calibration.scorer];
    let rows = chosen
        .iter()
        .map(|choice| (format!("chosen: {}", choice.policy.name), &choice.policy))
        .chain(
            calibration
                .baselines
                .iter()
                .map(|baseline| (baseline.name.clone(), baseline)),
        )
        .map(|(label, scored)| {
            vec![
                label,
                format!("{:.4}", scored.train.objective),
                format!("{:.4}", scored.holdout.objective),
                format!("{:.1}%", scored.holdout.hit_rate * 100.0),
                format!("{:.0}", scored.holdout.ttft_p95_ms),
            ]
        });
    table(
        out,
        &[
            "policy",
            "objective, first part",
            "objective, held out",
            "hit rate, held out",
            "TTFT p95 ms, held out",
        ],
        rows,
    );
    let verdict = |wins: bool| if wins { "holds" } else { "does not hold" };
    let _ = write!(
        out,
        "<p>On the held-out part the cache-aware choice {} against {}'s defaults and every fixed policy, and the scorer choice {} against the default weights and every fixed policy.</p><p>Flags for {}: <code>{}</code></p><details><summary>Endpoint-picker configuration</summary><pre>{}</pre></details>",
        verdict(calibration.cache_aware.wins_on_holdout),
        escape(&calibration.router),
        verdict(calibration.scorer.wins_on_holdout),
        escape(&calibration.router),
        escape(&calibration.router_flags),
        escape(&calibration.endpoint_picker)
    );
}

/// A report of the replay alone, for teams with no graded results.
pub fn replay_page(title: &str, replay: &ReplayDocument) -> String {
    super::kit::page(title, |out| replay_section(out, replay))
}

/// The replay's lines of the Markdown summary.
pub fn replay_summary(out: &mut String, replay: &ReplayDocument) {
    let _ = writeln!(
        out,
        "**Replica routing** on {} ({} requests, {} replicas; ceiling {:.1}% of prompt tokens from cache):\n",
        code(&replay.trace.path),
        replay.trace.requests,
        replay.pool.replicas,
        replay.trace.ceiling_hit_rate * 100.0
    );
    let rows = replay.policies.iter().map(|policy| {
        vec![
            text(&policy.name),
            format!("{:.1}%", policy.hit_rate * 100.0),
            format!("{:.0}", policy.ttft_ms.p95),
            format!("{:.0}", policy.herding_s),
        ]
    });
    out.push_str(&crate::markdown::table(
        &["policy", "hit rate", "TTFT p95 ms", "herding s"],
        rows,
        ..0,
    ));
    out.push('\n');
    if let Some(calibration) = &replay.calibration {
        let _ = writeln!(
            out,
            "Calibrated for {}: {} ({} on the held-out part); flags for {} {}.\n",
            text(&calibration.objective),
            code(&calibration.cache_aware.policy.name),
            if calibration.cache_aware.wins_on_holdout {
                "holds"
            } else {
                "does not hold"
            },
            text(&calibration.router),
            code(&calibration.router_flags)
        );
    }
}
