//! `routeval simulate`.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;

use crate::atomic::{Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::schema::{GRADED_OUTPUT, write_graded_parquet};
use crate::simulate::{
    Simulation, compare, compare_tiers, render_comparison, render_tiered, to_table,
};
use crate::units::Target;

use super::print::print;

/// The generative model's parameters; the defaults are the documented pair.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Requests to simulate.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub requests: usize,

    /// Seed; a seed gives the same table on every machine.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,

    /// Write the graded results to this Parquet file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Print always-large, always-small, the cascade and the predictive router side by side.
    #[arg(long)]
    pub compare: bool,

    /// Difficulty ~ Beta(alpha, beta).
    #[arg(long, value_name = "A", default_value_t = 2.0)]
    pub difficulty_alpha: f64,
    #[arg(long, value_name = "B", default_value_t = 3.0)]
    pub difficulty_beta: f64,

    /// A model solves a request with probability 1 / (1 + e^(-(skill - difficulty) / steepness)).
    #[arg(long, value_name = "W", default_value_t = 0.05)]
    pub steepness: f64,
    #[arg(long, value_name = "SKILL", default_value_t = 0.55)]
    pub small_skill: f64,
    #[arg(long, value_name = "SKILL", default_value_t = 0.92)]
    pub large_skill: f64,
    /// The mid-price model of the three-tier policies in --compare.
    #[arg(long, value_name = "SKILL", default_value_t = 0.75)]
    pub mid_skill: f64,

    /// Prices, USD per million tokens.
    #[arg(long, value_name = "USD", default_value_t = 0.15)]
    pub small_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.60)]
    pub small_output_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 3.0)]
    pub large_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 15.0)]
    pub large_output_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.6)]
    pub mid_input_price: f64,
    #[arg(long, value_name = "USD", default_value_t = 2.4)]
    pub mid_output_price: f64,

    /// Tokens per request.
    #[arg(long, value_name = "N", default_value_t = 1500.0)]
    pub input_tokens: f64,
    #[arg(long, value_name = "N", default_value_t = 300.0)]
    pub output_tokens: f64,

    /// Latencies, seconds: time to first token and to the whole answer.
    #[arg(long, value_name = "S", default_value_t = 0.25)]
    pub small_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub small_total: f64,
    #[arg(long, value_name = "S", default_value_t = 0.9)]
    pub large_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 6.0)]
    pub large_total: f64,
    #[arg(long, value_name = "S", default_value_t = 0.5)]
    pub mid_ttft: f64,
    #[arg(long, value_name = "S", default_value_t = 4.0)]
    pub mid_total: f64,

    /// Share of wrong small answers the verifier accepts.
    #[arg(long, value_name = "P", default_value_t = 0.10)]
    pub verifier_false_accept: f64,
    /// Share of right small answers the verifier rejects.
    #[arg(long, value_name = "P", default_value_t = 0.08)]
    pub verifier_false_reject: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.0002)]
    pub verifier_cost: f64,
    #[arg(long, value_name = "S", default_value_t = 0.4)]
    pub verifier_latency: f64,

    /// The router sees difficulty plus Gaussian noise of this sigma.
    #[arg(long, value_name = "SIGMA", default_value_t = 0.10)]
    pub router_noise: f64,
    #[arg(long, value_name = "USD", default_value_t = 0.00002)]
    pub router_cost: f64,
    #[arg(long, value_name = "S", default_value_t = 0.02)]
    pub router_latency: f64,
    /// In --compare, the router escalates when its score reaches this (score >= T).
    #[arg(long, value_name = "T", default_value_t = 0.5)]
    pub router_threshold: f64,

    /// In --compare, also the cheapest thresholds of each two- and
    /// three-tier policy that reach this quality on the simulated requests.
    #[arg(long, value_name = "Q", default_value = "0.95")]
    pub target: Target,
}

pub fn simulation(args: &SimulateArgs) -> Simulation {
    Simulation {
        requests: args.requests,
        seed: args.seed,
        difficulty_alpha: args.difficulty_alpha,
        difficulty_beta: args.difficulty_beta,
        steepness: args.steepness,
        small_skill: args.small_skill,
        large_skill: args.large_skill,
        mid_skill: args.mid_skill,
        small_input_price: args.small_input_price,
        small_output_price: args.small_output_price,
        large_input_price: args.large_input_price,
        large_output_price: args.large_output_price,
        mid_input_price: args.mid_input_price,
        mid_output_price: args.mid_output_price,
        input_tokens: args.input_tokens,
        output_tokens: args.output_tokens,
        small_ttft: args.small_ttft,
        small_total: args.small_total,
        large_ttft: args.large_ttft,
        large_total: args.large_total,
        mid_ttft: args.mid_ttft,
        mid_total: args.mid_total,
        verifier_false_accept: args.verifier_false_accept,
        verifier_false_reject: args.verifier_false_reject,
        verifier_cost: args.verifier_cost,
        verifier_latency: args.verifier_latency,
        router_noise: args.router_noise,
        router_cost: args.router_cost,
        router_latency: args.router_latency,
        router_threshold: args.router_threshold,
    }
}

pub fn run(args: SimulateArgs, reporter: &dyn crate::events::Reporter) -> anyhow::Result<Outcome> {
    if args.out.is_none() && !args.compare {
        bail!("nothing to do: give --out FILE, --compare, or both");
    }
    let simulation = simulation(&args);
    simulation.check()?;
    if let Some(out) = &args.out {
        check_outputs(&[Output::new(out, "--out", &GRADED_OUTPUT)], &[])?;
    }
    let rows = simulation.rows_reported(reporter);
    if let Some(out) = &args.out {
        write_graded_parquet(&to_table(&simulation, &rows, out.clone()), out)?;
    }
    if args.compare {
        let table = render_comparison(&compare(&simulation, &rows), simulation.requests);
        print(&table)?;
        print(&render_tiered(
            &compare_tiers(&simulation, &rows, args.target),
            args.target,
        ))?;
    }
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    #[test]
    fn flag_defaults_are_the_documented_model() {
        let cli = Cli::try_parse_from(["routeval", "simulate", "--compare"]).unwrap();
        let Command::Simulate(args) = cli.command else {
            panic!("a simulate command");
        };
        assert_eq!(simulation(&args), Simulation::default());
    }
}
