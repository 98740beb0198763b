//! `routeval simulate`.

use anyhow::bail;

use crate::atomic::{Output, check_outputs};
use crate::exit_codes::Outcome;
use crate::schema::{GRADED_OUTPUT, write_graded_parquet};
use crate::simulate::{
    Simulation, compare, compare_tiers, render_comparison, render_tiered, to_table,
};

use super::args::SimulateArgs;
use super::print::print;

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

pub fn run(args: SimulateArgs) -> anyhow::Result<Outcome> {
    if args.out.is_none() && !args.compare {
        bail!("nothing to do: give --out FILE, --compare, or both");
    }
    let simulation = simulation(&args);
    simulation.check()?;
    if !(args.target > 0.0 && args.target <= 1.0) {
        bail!("--target must be in (0, 1], got {}", args.target);
    }
    if let Some(out) = &args.out {
        check_outputs(&[Output::new(out, "--out", &GRADED_OUTPUT)], &[])?;
    }
    let rows = simulation.rows();
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
