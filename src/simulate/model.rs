//! The generative model's parameters, its rows, and the graded table it
//! becomes.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{BooleanArray, Float64Array, StringArray};
use arrow::datatypes::{DataType, Field};

use crate::schema::{GradedBatch, GradedTable, Present};

use crate::stats::Random;

/// Every parameter of the model; [`Default`] is the documented pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    pub requests: usize,
    pub seed: u64,
    pub difficulty_alpha: f64,
    pub difficulty_beta: f64,
    /// Width of the logistic step from "solves" to "fails", in difficulty.
    pub steepness: f64,
    pub small_skill: f64,
    pub large_skill: f64,
    /// The mid-price model between them, for three-tier policies.
    pub mid_skill: f64,
    /// USD per million tokens.
    pub small_input_price: f64,
    pub small_output_price: f64,
    pub large_input_price: f64,
    pub large_output_price: f64,
    pub mid_input_price: f64,
    pub mid_output_price: f64,
    pub input_tokens: f64,
    pub output_tokens: f64,
    /// Seconds.
    pub small_ttft: f64,
    pub small_total: f64,
    pub large_ttft: f64,
    pub large_total: f64,
    pub mid_ttft: f64,
    pub mid_total: f64,
    pub verifier_false_accept: f64,
    pub verifier_false_reject: f64,
    pub verifier_cost: f64,
    pub verifier_latency: f64,
    pub router_noise: f64,
    pub router_cost: f64,
    pub router_latency: f64,
    pub router_threshold: f64,
}

impl Default for Simulation {
    fn default() -> Self {
        Simulation {
            requests: 20_000,
            seed: 0,
            difficulty_alpha: 2.0,
            difficulty_beta: 3.0,
            steepness: 0.05,
            small_skill: 0.55,
            large_skill: 0.92,
            mid_skill: 0.75,
            small_input_price: 0.15,
            small_output_price: 0.60,
            large_input_price: 3.0,
            large_output_price: 15.0,
            mid_input_price: 0.6,
            mid_output_price: 2.4,
            input_tokens: 1500.0,
            output_tokens: 300.0,
            small_ttft: 0.25,
            small_total: 3.0,
            large_ttft: 0.9,
            large_total: 6.0,
            mid_ttft: 0.5,
            mid_total: 4.0,
            verifier_false_accept: 0.10,
            verifier_false_reject: 0.08,
            verifier_cost: 0.0002,
            verifier_latency: 0.4,
            router_noise: 0.10,
            router_cost: 0.00002,
            router_latency: 0.02,
            router_threshold: 0.5,
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--{flag} {problem}, got {value}")]
pub struct SimulationError {
    pub flag: &'static str,
    pub problem: &'static str,
    pub value: f64,
}

/// One simulated request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimulatedRow {
    pub difficulty: f64,
    /// What the router sees: difficulty plus noise.
    pub router_score: f64,
    pub small_ok: bool,
    pub large_ok: bool,
    /// Whether the verifier rejects the small answer.
    pub verifier_rejects: bool,
    pub mid_ok: bool,
    /// Whether the verifier rejects the mid model's answer.
    pub mid_verifier_rejects: bool,
}

/// The refusal of `flag`'s `value`.
fn refuse(flag: &'static str, problem: &'static str, value: f64) -> Result<(), SimulationError> {
    Err(SimulationError {
        flag,
        problem,
        value,
    })
}

impl Simulation {
    /// Refuses parameters outside their meaning, naming the flag.
    pub fn check(&self) -> Result<(), SimulationError> {
        self.check_ranges()?;
        self.check_limits()
    }

    /// Each parameter in its own range.
    fn check_ranges(&self) -> Result<(), SimulationError> {
        let error = refuse;
        if self.requests == 0 {
            return error("requests", "must be at least 1", 0.0);
        }
        let positive = [
            ("difficulty-alpha", self.difficulty_alpha),
            ("difficulty-beta", self.difficulty_beta),
            ("steepness", self.steepness),
        ];
        for (flag, value) in positive {
            if !(value.is_finite() && value > 0.0) {
                return error(flag, "must be positive", value);
            }
        }
        let probabilities = [
            ("verifier-false-accept", self.verifier_false_accept),
            ("verifier-false-reject", self.verifier_false_reject),
        ];
        for (flag, value) in probabilities {
            if !(0.0..=1.0).contains(&value) {
                return error(flag, "must be a probability in [0, 1]", value);
            }
        }
        let non_negative = [
            ("small-skill", self.small_skill),
            ("large-skill", self.large_skill),
            ("mid-skill", self.mid_skill),
            ("mid-input-price", self.mid_input_price),
            ("mid-output-price", self.mid_output_price),
            ("mid-ttft", self.mid_ttft),
            ("mid-total", self.mid_total),
            ("small-input-price", self.small_input_price),
            ("small-output-price", self.small_output_price),
            ("large-input-price", self.large_input_price),
            ("large-output-price", self.large_output_price),
            ("input-tokens", self.input_tokens),
            ("output-tokens", self.output_tokens),
            ("small-ttft", self.small_ttft),
            ("small-total", self.small_total),
            ("large-ttft", self.large_ttft),
            ("large-total", self.large_total),
            ("verifier-cost", self.verifier_cost),
            ("verifier-latency", self.verifier_latency),
            ("router-noise", self.router_noise),
            ("router-cost", self.router_cost),
            ("router-latency", self.router_latency),
        ];
        for (flag, value) in non_negative {
            if !(value.is_finite() && value >= 0.0) {
                return error(flag, "must be finite and non-negative", value);
            }
        }
        Ok(())
    }

    /// The parameters together: a total no shorter than its first token,
    /// and no call that costs or takes more than a reader accepts.
    fn check_limits(&self) -> Result<(), SimulationError> {
        const MAX_SECONDS: f64 = 86_400.0;
        let error = refuse;
        if self.small_total < self.small_ttft {
            return error(
                "small-total",
                "must be at least --small-ttft",
                self.small_total,
            );
        }
        if self.mid_total < self.mid_ttft {
            return error("mid-total", "must be at least --mid-ttft", self.mid_total);
        }
        if self.large_total < self.large_ttft {
            return error(
                "large-total",
                "must be at least --large-ttft",
                self.large_total,
            );
        }
        if !self.router_threshold.is_finite() {
            return error("router-threshold", "must be finite", self.router_threshold);
        }
        // The table must be one every reader accepts: no call may cost more
        // than the per-call limit the graded-results readers enforce.
        let limit = crate::schema::MAX_COST_USD;
        let costs = [
            ("input-tokens", self.small_cost()),
            ("input-tokens", self.large_cost()),
            ("input-tokens", self.mid_cost()),
            ("verifier-cost", self.verifier_cost),
            ("router-cost", self.router_cost),
        ];
        for (flag, cost) in costs {
            if cost.is_nan() || cost > limit {
                return error(
                    flag,
                    "makes a call cost more than 1e6 USD, the per-call limit",
                    cost,
                );
            }
        }
        let seconds = [
            ("small-total", self.small_total),
            ("large-total", self.large_total),
            ("mid-total", self.mid_total),
            ("verifier-latency", self.verifier_latency),
            ("router-latency", self.router_latency),
        ];
        for (flag, value) in seconds {
            if value > MAX_SECONDS {
                return error(flag, "must be at most 86400 s", value);
            }
        }
        Ok(())
    }

    pub fn solve_probability(&self, skill: f64, difficulty: f64) -> f64 {
        1.0 / (1.0 + (-(skill - difficulty) / self.steepness).exp())
    }

    pub fn small_cost(&self) -> f64 {
        (self.input_tokens * self.small_input_price + self.output_tokens * self.small_output_price)
            / 1e6
    }

    pub fn large_cost(&self) -> f64 {
        (self.input_tokens * self.large_input_price + self.output_tokens * self.large_output_price)
            / 1e6
    }

    pub fn mid_cost(&self) -> f64 {
        (self.input_tokens * self.mid_input_price + self.output_tokens * self.mid_output_price)
            / 1e6
    }

    /// The requests, deterministic for a seed. The mid model draws from its
    /// own stream, so the small and large models' rows are those of the
    /// two-model simulation with the same seed.
    pub fn rows(&self) -> Vec<SimulatedRow> {
        self.rows_reported(&crate::events::Silent)
    }

    /// [`Simulation::rows`], telling `reporter` how far it got (a hundred
    /// times at most): millions of requests take seconds.
    pub fn rows_reported(&self, reporter: &dyn crate::events::Reporter) -> Vec<SimulatedRow> {
        use crate::events::Event;
        let lane = || "requests".to_owned();
        let total = self.requests as u64;
        reporter.report(Event::Planned {
            stage: "simulate",
            lane: lane(),
            total,
        });
        let every = (total / 100).max(1);
        let mut random = Random::new(self.seed);
        let mut mid_random = Random::new(self.seed ^ 0x6d69_645f_7469_6572);
        let rows = (0..self.requests)
            .map(|index| {
                let done = index as u64 + 1;
                if done.is_multiple_of(every) || done == total {
                    reporter.report(Event::Progress {
                        stage: "simulate",
                        lane: lane(),
                        done,
                        total,
                        errors: 0,
                        last_error: None,
                        retries: 0,
                        cached: 0,
                        cost_usd: 0.0,
                    });
                }
                let difficulty = random.beta(self.difficulty_alpha, self.difficulty_beta);
                let router_score = difficulty + self.router_noise * random.normal();
                let small_ok = random.chance(self.solve_probability(self.small_skill, difficulty));
                let large_ok = random.chance(self.solve_probability(self.large_skill, difficulty));
                let verifier_rejects = if small_ok {
                    random.chance(self.verifier_false_reject)
                } else {
                    !random.chance(self.verifier_false_accept)
                };
                let mid_ok = mid_random.chance(self.solve_probability(self.mid_skill, difficulty));
                let mid_verifier_rejects = if mid_ok {
                    mid_random.chance(self.verifier_false_reject)
                } else {
                    !mid_random.chance(self.verifier_false_accept)
                };
                SimulatedRow {
                    difficulty,
                    router_score,
                    small_ok,
                    large_ok,
                    verifier_rejects,
                    mid_ok,
                    mid_verifier_rejects,
                }
            })
            .collect();
        reporter.report(Event::Finished {
            stage: "simulate",
            lane: lane(),
        });
        rows
    }
}

/// The rows as a graded-results table: `score` is the router's score; the
/// verifier's verdict (1 = reject) and the true difficulty are carried as
/// `verifier_score` and `difficulty`, so `--score-col verifier_score` gives a
/// cascade's table.
pub fn to_table(simulation: &Simulation, rows: &[SimulatedRow], path: PathBuf) -> GradedTable {
    let n = rows.len();
    let constant = |value: f64| Float64Array::from(vec![value; n]);
    let floats =
        |value: fn(&SimulatedRow) -> f64| Float64Array::from_iter_values(rows.iter().map(value));
    let batch = GradedBatch {
        first_row: 0,
        lines: None,
        id: StringArray::from_iter_values((0..n).map(|index| format!("sim-{index:07}"))),
        slice: StringArray::from(vec!["sim"; n]),
        score: floats(|row| row.router_score),
        small_ok: BooleanArray::from(rows.iter().map(|row| row.small_ok).collect::<Vec<_>>()),
        large_ok: BooleanArray::from(rows.iter().map(|row| row.large_ok).collect::<Vec<_>>()),
        cost_small: constant(simulation.small_cost()),
        cost_large: constant(simulation.large_cost()),
        cost_verifier: constant(simulation.verifier_cost),
        cost_router: constant(simulation.router_cost),
        latencies: [
            Some(constant(simulation.small_total * 1000.0)),
            Some(constant(simulation.small_ttft * 1000.0)),
            Some(constant(simulation.large_total * 1000.0)),
            Some(constant(simulation.large_ttft * 1000.0)),
            Some(constant(simulation.verifier_latency * 1000.0)),
            Some(constant(simulation.router_latency * 1000.0)),
        ],
        models: Default::default(),
        audited: Default::default(),
        extra: vec![
            (
                Arc::new(Field::new("verifier_score", DataType::Float64, false)),
                Arc::new(floats(|row| f64::from(u8::from(row.verifier_rejects)))),
            ),
            (
                Arc::new(Field::new("difficulty", DataType::Float64, false)),
                Arc::new(floats(|row| row.difficulty)),
            ),
            // The mid model, for `--tiers small,mid,large`: its outcome and
            // cost, and each cascade stage's verifier score and cost.
            (
                Arc::new(Field::new("mid_ok", DataType::Boolean, false)),
                Arc::new(BooleanArray::from(
                    rows.iter().map(|row| row.mid_ok).collect::<Vec<_>>(),
                )),
            ),
            (
                Arc::new(Field::new("cost_mid", DataType::Float64, false)),
                Arc::new(constant(simulation.mid_cost())),
            ),
            (
                Arc::new(Field::new("mid_ms", DataType::Float64, false)),
                Arc::new(constant(simulation.mid_total * 1000.0)),
            ),
            (
                Arc::new(Field::new("mid_ttft_ms", DataType::Float64, false)),
                Arc::new(constant(simulation.mid_ttft * 1000.0)),
            ),
            (
                Arc::new(Field::new("score_small", DataType::Float64, false)),
                Arc::new(floats(|row| f64::from(u8::from(row.verifier_rejects)))),
            ),
            (
                Arc::new(Field::new("score_mid", DataType::Float64, false)),
                Arc::new(floats(|row| f64::from(u8::from(row.mid_verifier_rejects)))),
            ),
            (
                Arc::new(Field::new("cost_verifier_mid", DataType::Float64, false)),
                Arc::new(constant(simulation.verifier_cost)),
            ),
        ],
    };
    GradedTable {
        path,
        batches: vec![batch],
        present: Present {
            latencies: [true; 6],
            models: [false; 3],
            audited: [false; 2],
        },
        tiers: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_solve_at_the_rate_the_model_implies() {
        let simulation = Simulation {
            requests: 100_000,
            ..Simulation::default()
        };
        let rows = simulation.rows();
        // E[P(solve)] over Beta(2, 3), integrated numerically: density 12 d (1 - d)^2.
        let expected = |skill: f64| {
            let steps = 20_000u32;
            (0..steps)
                .map(|step| {
                    let d = (f64::from(step) + 0.5) / f64::from(steps);
                    12.0 * d * (1.0 - d).powi(2) * simulation.solve_probability(skill, d)
                        / f64::from(steps)
                })
                .sum::<f64>()
        };
        let share = |ok: fn(&SimulatedRow) -> bool| {
            rows.iter().filter(|row| ok(row)).count() as f64 / rows.len() as f64
        };
        assert!((share(|row| row.small_ok) - expected(0.55)).abs() < 0.005);
        assert!((share(|row| row.large_ok) - expected(0.92)).abs() < 0.005);
    }

    #[test]
    fn the_verifier_errs_at_its_rates() {
        let rows = Simulation {
            requests: 100_000,
            seed: 5,
            ..Simulation::default()
        }
        .rows();
        let rate = |small_ok: bool, outcome: fn(&SimulatedRow) -> bool| {
            let group: Vec<_> = rows.iter().filter(|row| row.small_ok == small_ok).collect();
            group.iter().filter(|row| outcome(row)).count() as f64 / group.len() as f64
        };
        assert!((rate(false, |row| !row.verifier_rejects) - 0.10).abs() < 0.01);
        assert!((rate(true, |row| row.verifier_rejects) - 0.08).abs() < 0.01);
    }

    #[test]
    fn parameters_out_of_range_name_their_flag() {
        let bad = Simulation {
            small_skill: -1.0,
            ..Simulation::default()
        };
        assert_eq!(
            bad.check().unwrap_err().to_string(),
            "--small-skill must be finite and non-negative, got -1"
        );
        let bad = Simulation {
            verifier_false_accept: 1.5,
            ..Simulation::default()
        };
        assert_eq!(
            bad.check().unwrap_err().to_string(),
            "--verifier-false-accept must be a probability in [0, 1], got 1.5"
        );
        assert!(Simulation::default().check().is_ok());
    }
}
