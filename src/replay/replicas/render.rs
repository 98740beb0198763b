//! The replay on the terminal: one row per policy, and the calibration's
//! choice against the defaults on both parts of the trace.

use crate::schema::{Calibration, ReplayDocument, Scored};

pub fn render_policies(document: &ReplayDocument) -> String {
    let (trace, pool) = (&document.trace, &document.pool);
    let cache = pool.cache_blocks.map_or_else(
        || "unbounded caches".to_owned(),
        |blocks| format!("{blocks} cache blocks each"),
    );
    let header = [
        "policy",
        "hit rate",
        "prefill Mtok",
        "TTFT p50 ms",
        "p95",
        "p99",
        "queue p95 ms",
        "imbalance",
        "herding s",
        "drift misses",
    ];
    let rows = document.policies.iter().map(|policy| {
        vec![
            policy.name.clone(),
            format!("{:.1}%", policy.hit_rate * 100.0),
            format!("{:.2}", policy.prefill_tokens as f64 / 1e6),
            format!("{:.0}", policy.ttft_ms.p50),
            format!("{:.0}", policy.ttft_ms.p95),
            format!("{:.0}", policy.ttft_ms.p99),
            format!("{:.0}", policy.queue_ms.p95),
            format!("{:.2}", policy.imbalance),
            format!("{:.0}", policy.herding_s),
            policy.index_drift_misses.to_string(),
        ]
    });
    let table = crate::terminal::table(header, rows);
    let speedup = if pool.speedup == 1.0 {
        String::new()
    } else {
        format!(" replayed {}x faster", pool.speedup)
    };
    format!(
        "{}: {} requests over {:.0} s{speedup}, {} replicas, {cache}; one replica holding every cache would hit {:.1}%\n{}\n",
        trace.path,
        trace.requests,
        trace.duration_s,
        pool.replicas,
        trace.ceiling_hit_rate * 100.0,
        table
    )
}

pub fn render_calibration(calibration: &Calibration) -> String {
    let unit = if calibration.objective == "hit-rate" {
        "hit rate"
    } else {
        "p95 TTFT ms"
    };
    let value = |objective: f64| {
        if calibration.objective == "hit-rate" {
            format!("{:.1}%", objective * 100.0)
        } else {
            format!("{objective:.0}")
        }
    };
    let header = [
        "policy".to_owned(),
        format!("first {} requests: {unit}", calibration.train_requests),
        format!("held-out {}: {unit}", calibration.holdout_requests),
    ];
    let mut rows = Vec::new();
    let mut row = |label: &str, scored: &Scored| {
        rows.push(vec![
            format!("{label}{}", scored.name),
            value(scored.train.objective),
            value(scored.holdout.objective),
        ]);
    };
    row("chosen ", &calibration.cache_aware.policy);
    row("chosen ", &calibration.scorer.policy);
    for baseline in &calibration.baselines {
        row("", baseline);
    }
    let verdict = |wins: bool| {
        if wins {
            "holds on the held-out part (beats its preset and every fixed policy)"
        } else {
            "does NOT hold on the held-out part (its preset or a fixed policy does better): keep the preset"
        }
    };
    format!(
        "calibration for {} over {} grid points\n{}\ncache-aware choice {}\nscorer choice {}\nflags for {}: {}\nendpoint picker:\n{}",
        calibration.objective,
        calibration.grid.points,
        crate::terminal::table(header, rows),
        verdict(calibration.cache_aware.wins_on_holdout),
        verdict(calibration.scorer.wins_on_holdout),
        calibration.router,
        calibration.router_flags,
        calibration.endpoint_picker
    )
}
