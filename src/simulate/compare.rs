//! `routeval simulate --compare`: the four ways to serve the simulated
//! traffic side by side.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::model::{SimulatedRow, Simulation};

#[derive(Debug, Clone, PartialEq)]
pub struct PolicySummary {
    pub policy: &'static str,
    pub dollars_per_1k: f64,
    pub quality: f64,
    /// Share of requests the large model answers.
    pub large_share: f64,
    pub p95_ttft_ms: f64,
}

/// Always-large, always-small, the cascade (escalate what the verifier
/// rejects, after the small model's whole answer and the verifier) and the
/// predictive router (escalate when its score exceeds the threshold).
pub fn compare(simulation: &Simulation, rows: &[SimulatedRow]) -> Vec<PolicySummary> {
    let small_cost = simulation.small_cost();
    let large_cost = simulation.large_cost();
    let ms = |seconds: f64| seconds * 1000.0;
    let summarise = |policy: &'static str,
                     serve: &dyn Fn(&SimulatedRow) -> (bool, bool, f64, f64)| {
        let mut good = 0usize;
        let mut large = 0usize;
        let mut cost = 0.0;
        let mut ttft = Vec::with_capacity(rows.len());
        for row in rows {
            let (ok, escalated, row_cost, row_ttft) = serve(row);
            good += usize::from(ok);
            large += usize::from(escalated);
            cost += row_cost;
            ttft.push(row_ttft);
        }
        ttft.sort_by(f64::total_cmp);
        let n = rows.len() as f64;
        let rank = ((0.95 * n).ceil() as usize).clamp(1, rows.len());
        PolicySummary {
            policy,
            dollars_per_1k: cost / n * 1000.0,
            quality: good as f64 / n,
            large_share: large as f64 / n,
            p95_ttft_ms: ttft[rank - 1],
        }
    };
    let verified = ms(simulation.small_total + simulation.verifier_latency);
    vec![
        summarise("always large", &|row| {
            (row.large_ok, true, large_cost, ms(simulation.large_ttft))
        }),
        summarise("always small", &|row| {
            (row.small_ok, false, small_cost, ms(simulation.small_ttft))
        }),
        summarise("cascade", &|row| {
            let cost = small_cost + simulation.verifier_cost;
            if row.verifier_rejects {
                (
                    row.large_ok,
                    true,
                    cost + large_cost,
                    verified + ms(simulation.large_ttft),
                )
            } else {
                (row.small_ok, false, cost, verified)
            }
        }),
        summarise("predictive", &|row| {
            let escalate = row.router_score > simulation.router_threshold;
            let (ok, cost, ttft) = if escalate {
                (row.large_ok, large_cost, simulation.large_ttft)
            } else {
                (row.small_ok, small_cost, simulation.small_ttft)
            };
            (
                ok,
                escalate,
                cost + simulation.router_cost,
                ms(simulation.router_latency + ttft),
            )
        }),
    ]
}

pub fn render_comparison(summaries: &[PolicySummary], requests: usize) -> String {
    let mut builder = Builder::default();
    builder.push_record([
        "policy",
        "$ per 1k req",
        "quality",
        "sent to large",
        "p95 TTFT ms",
    ]);
    for summary in summaries {
        builder.push_record([
            summary.policy.to_owned(),
            format!("{:.3}", summary.dollars_per_1k),
            format!("{:.4}", summary.quality),
            format!("{:.1}%", summary.large_share * 100.0),
            format!("{:.0}", summary.p95_ttft_ms),
        ]);
    }
    let mut table = builder.build();
    table
        .with(Style::sharp())
        .modify(Columns::new(1..), Alignment::right());
    format!("{requests} simulated requests\n{table}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summaries_obey_the_cascade_and_router_algebra() {
        let simulation = Simulation::default();
        let rows = simulation.rows();
        let summaries = compare(&simulation, &rows);
        let by_name = |name: &str| {
            summaries
                .iter()
                .find(|summary| summary.policy == name)
                .unwrap()
        };
        let (small, large) = (
            simulation.small_cost() * 1000.0,
            simulation.large_cost() * 1000.0,
        );
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;

        assert!(close(by_name("always large").dollars_per_1k, large));
        assert!(close(by_name("always small").dollars_per_1k, small));
        // Cascade: every request pays small + verifier, rejected ones the large too.
        let cascade = by_name("cascade");
        assert!(close(
            cascade.dollars_per_1k,
            small + simulation.verifier_cost * 1000.0 + cascade.large_share * large
        ));
        // Its escalations wait for the whole small answer and the verifier.
        assert!(cascade.large_share > 0.05);
        assert!(close(cascade.p95_ttft_ms, (3.0 + 0.4 + 0.9) * 1000.0));
        let predictive = by_name("predictive");
        assert!(close(
            predictive.dollars_per_1k,
            simulation.router_cost * 1000.0 + small + predictive.large_share * (large - small)
        ));
        assert!(close(predictive.p95_ttft_ms, (0.02 + 0.9) * 1000.0));

        // Quality lost by a cascade is exactly its false accepts.
        let n = rows.len() as f64;
        let false_accepts = rows
            .iter()
            .filter(|row| !row.small_ok && !row.verifier_rejects)
            .count() as f64;
        let rejected_large_wrong = rows
            .iter()
            .filter(|row| row.verifier_rejects && !row.large_ok)
            .count() as f64;
        assert!(close(
            cascade.quality,
            1.0 - (false_accepts + rejected_large_wrong) / n
        ));
    }
}
