//! What serving one row gives under a policy: whether the served answer was
//! acceptable, what the row cost, and when its first token arrived. The
//! cascade algebra of DOMAIN.md lives here and only here.

use super::money::to_picodollars;
use super::row::GradedRow;
use super::tiers::{Served, TieredOutcomes, serve_tier};
use crate::schema::Policy;

/// A row's costs in picodollars, converted once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priced {
    pub small: i64,
    pub large: i64,
    pub verifier: i64,
    pub router: i64,
}

impl Priced {
    pub fn of(row: &GradedRow) -> Priced {
        Priced {
            small: to_picodollars(row.cost_small),
            large: to_picodollars(row.cost_large),
            verifier: to_picodollars(row.cost_verifier),
            router: to_picodollars(row.cost_router),
        }
    }
}

/// `row` under `policy`, escalated or not.
/// - predictive: the router, then the small or the large tier;
/// - cascade: the small tier and the verifier always, the large tier too
///   when escalated.
pub fn serve_row(policy: Policy, row: &GradedRow, escalate: bool) -> Served {
    serve_row_priced(policy, row, &Priced::of(row), escalate)
}

/// [`serve`] with the row's costs already in picodollars: the two-tier case
/// of [`serve_tier`].
#[inline]
pub fn serve_row_priced(
    policy: Policy,
    row: &GradedRow,
    priced: &Priced,
    escalate: bool,
) -> Served {
    let outcomes = TieredOutcomes {
        ok: &[row.small_ok, row.large_ok],
        cost: &[priced.small, priced.large],
        router: priced.router,
        verifier: &[priced.verifier],
    };
    serve_tier(policy, &outcomes, usize::from(escalate))
}

/// `row` served by one tier alone, with no router or verifier.
pub fn serve_row_alone(row: &GradedRow, large: bool) -> Served {
    Served {
        ok: if large { row.large_ok } else { row.small_ok },
        cost: to_picodollars(if large {
            row.cost_large
        } else {
            row.cost_small
        }),
        false_accept: false,
    }
}

/// A row's recorded latencies in milliseconds, where the results have them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latencies {
    pub small_total: Option<f64>,
    pub small_first_token: Option<f64>,
    pub large_first_token: Option<f64>,
    pub verifier: Option<f64>,
    pub router: Option<f64>,
}

/// Time to the served answer's first token.
/// - predictive: the router's time (0 where not recorded), then the served
///   tier's first token;
/// - cascade: the small answer is released, or escalated, only once it is
///   complete and verified, so an escalated row waits for the small tier's
///   whole answer, the verifier, and the large tier's first token.
pub fn first_token_ms(policy: Policy, latencies: &Latencies, escalate: bool) -> Option<f64> {
    match policy {
        Policy::Predictive => {
            let tier = if escalate {
                latencies.large_first_token
            } else {
                latencies.small_first_token
            };
            tier.map(|ms| ms + latencies.router.unwrap_or(0.0))
        }
        Policy::Cascade => {
            let verified = latencies
                .small_total
                .zip(latencies.verifier)
                .map(|(small, verifier)| small + verifier);
            if escalate {
                verified
                    .zip(latencies.large_first_token)
                    .map(|(verified, large)| verified + large)
            } else {
                verified
            }
        }
    }
}

/// Time to the first token of one tier serving alone.
pub fn first_token_alone_ms(latencies: &Latencies, large: bool) -> Option<f64> {
    if large {
        latencies.large_first_token
    } else {
        latencies.small_first_token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW: GradedRow = GradedRow {
        score: 0.5,
        small_ok: false,
        large_ok: true,
        cost_small: 0.001,
        cost_large: 0.01,
        cost_verifier: 0.0002,
        cost_router: 0.00002,
    };

    #[test]
    fn the_cascade_algebra() {
        let pico = to_picodollars;
        let kept = serve_row(Policy::Cascade, &ROW, false);
        assert_eq!(kept.cost, pico(0.001) + pico(0.0002));
        assert!(!kept.ok && kept.false_accept);
        let escalated = serve_row(Policy::Cascade, &ROW, true);
        assert_eq!(escalated.cost, pico(0.001) + pico(0.0002) + pico(0.01));
        assert!(escalated.ok && !escalated.false_accept);
        let routed = serve_row(Policy::Predictive, &ROW, true);
        assert_eq!(routed.cost, pico(0.00002) + pico(0.01));
        let latencies = Latencies {
            small_total: Some(3000.0),
            small_first_token: Some(250.0),
            large_first_token: Some(900.0),
            verifier: Some(400.0),
            router: Some(20.0),
        };
        assert_eq!(
            first_token_ms(Policy::Cascade, &latencies, true),
            Some(4300.0)
        );
        assert_eq!(
            first_token_ms(Policy::Cascade, &latencies, false),
            Some(3400.0)
        );
        assert_eq!(
            first_token_ms(Policy::Predictive, &latencies, true),
            Some(920.0)
        );
    }
}
