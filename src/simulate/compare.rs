//! `routeval simulate --compare`: the four ways to serve the simulated
//! traffic side by side.

use super::model::{SimulatedRow, Simulation};
use crate::policy::{
    GradedRow, Latencies, Policy, Tally, escalates, first_token_alone_ms, first_token_ms,
    serve_row, serve_row_alone,
};

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
/// predictive router (escalate when its score reaches the threshold), each
/// served by the policy kernel exactly as `calibrate` and `gate` serve the
/// simulated table.
pub fn compare(simulation: &Simulation, rows: &[SimulatedRow]) -> Vec<PolicySummary> {
    let ms = |seconds: f64| Some(seconds * 1000.0);
    let latencies = Latencies {
        small_total: ms(simulation.small_total),
        small_first_token: ms(simulation.small_ttft),
        large_first_token: ms(simulation.large_ttft),
        verifier: ms(simulation.verifier_latency),
        router: ms(simulation.router_latency),
    };
    let graded = |row: &SimulatedRow, score: f64| GradedRow {
        score,
        small_ok: row.small_ok,
        large_ok: row.large_ok,
        cost_small: simulation.small_cost(),
        cost_large: simulation.large_cost(),
        cost_verifier: simulation.verifier_cost,
        cost_router: simulation.router_cost,
    };
    let summarise = |name: &'static str, serve_row: &dyn Fn(&SimulatedRow, &mut Tally)| {
        let mut tally = Tally::default();
        for row in rows {
            serve_row(row, &mut tally);
        }
        let metrics = tally.metrics(name.to_owned(), false, None);
        PolicySummary {
            policy: name,
            dollars_per_1k: metrics.mean_cost * 1000.0,
            quality: metrics.quality,
            large_share: metrics.escalation_rate,
            p95_ttft_ms: metrics.p95_ms.unwrap_or(0.0),
        }
    };
    let alone = |large: bool| {
        move |row: &SimulatedRow, tally: &mut Tally| {
            tally.add(
                serve_row_alone(&graded(row, 0.0), large),
                large,
                first_token_alone_ms(&latencies, large),
            );
        }
    };
    // The verifier's verdict is its score (1 = reject), as in the simulated
    // table's `verifier_score`; a cascade escalates at threshold 1.
    let policy = |policy: Policy, threshold: f64| {
        move |row: &SimulatedRow, tally: &mut Tally| {
            let score = match policy {
                Policy::Predictive => row.router_score,
                Policy::Cascade => f64::from(u8::from(row.verifier_rejects)),
            };
            let escalate = escalates(score, threshold);
            tally.add(
                serve_row(policy, &graded(row, score), escalate),
                escalate,
                first_token_ms(policy, &latencies, escalate),
            );
        }
    };
    vec![
        summarise("always large", &alone(true)),
        summarise("always small", &alone(false)),
        summarise("cascade", &policy(Policy::Cascade, 1.0)),
        summarise(
            "predictive",
            &policy(Policy::Predictive, simulation.router_threshold),
        ),
    ]
}

pub fn render_comparison(summaries: &[PolicySummary], requests: usize) -> String {
    let table = crate::terminal::table(
        [
            "policy",
            "$ per 1k req",
            "quality",
            "sent to large",
            "p95 TTFT ms",
        ],
        summaries.iter().map(|summary| {
            vec![
                summary.policy.to_owned(),
                format!("{:.3}", summary.dollars_per_1k),
                format!("{:.4}", summary.quality),
                format!("{:.1}%", summary.large_share * 100.0),
                format!("{:.0}", summary.p95_ttft_ms),
            ]
        }),
    );
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
