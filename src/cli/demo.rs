//! `routeval demo`: the whole pipeline on the embedded simulated endpoint,
//! with no key and no network. Each step is the command a user would run,
//! so the demo shows the workflow as well as the results.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;

use crate::atomic::{Named, OwnedDirectory};
use crate::exit_codes::Outcome;
use crate::routes::RouteConfig;
use crate::rubric::load_rubrics;
use crate::schema::{GATE_REPORT_FILE, GateReport, read_dataset, read_document};
use crate::upstream_sim::{FaultProfile, SimSettings, spawn};

use super::args::{Cli, DemoArgs};
use super::demo_inputs::{INPUTS_DIR, write_inputs};
use super::print::println;

/// Runs one routeval command as the CLI would.
fn step(title: &str, arguments: &[OsString]) -> anyhow::Result<Outcome> {
    step_with(title, arguments, |_| {})
}

/// [`step`], with `adjust` applied to the parsed command.
fn step_with(
    title: &str,
    arguments: &[OsString],
    adjust: impl FnOnce(&mut Cli),
) -> anyhow::Result<Outcome> {
    println(&format!("\n== {title}"))?;
    let mut full = vec![OsString::from("routeval")];
    full.extend_from_slice(arguments);
    let mut cli = Cli::try_parse_from(full).with_context(|| format!("demo step {title:?}"))?;
    adjust(&mut cli);
    super::run(cli).with_context(|| format!("demo step {title:?}"))
}

fn args(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    parts
        .iter()
        .map(|part| part.as_ref().to_os_string())
        .collect()
}

pub fn run(args_in: DemoArgs) -> anyhow::Result<Outcome> {
    let started = std::time::Instant::now();
    let out = &args_in
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("runs/demo"));
    let report_dir = match (&args_in.report, &args_in.out) {
        (Some(report), _) => report.clone(),
        (None, Some(out)) => out.join("report"),
        (None, None) => PathBuf::from("reports/demo"),
    };
    let given: Vec<Named<'_>> = [(&args_in.data, "--data"), (&args_in.rubrics, "--rubrics")]
        .into_iter()
        .filter_map(|(path, flag)| path.as_deref().map(|path| Named::new(path, flag)))
        .collect();
    for input in &given {
        if !input.path.is_dir() {
            anyhow::bail!(
                "{}: no such directory ({})",
                input.path.display(),
                input.flag
            );
        }
    }
    DEMO_DIRECTORY.claim(out, &given)?;
    let (data, rubrics) = match (&args_in.data, &args_in.rubrics) {
        (Some(data), Some(rubrics)) => (data.clone(), rubrics.clone()),
        (data, rubrics) => {
            let (embedded_data, embedded_rubrics) = write_inputs(&out.join(INPUTS_DIR))?;
            println(&format!(
                "the demo's inputs: {}",
                out.join(INPUTS_DIR).display()
            ))?;
            (
                data.clone().unwrap_or(embedded_data),
                rubrics.clone().unwrap_or(embedded_rubrics),
            )
        }
    };
    let data = &data;
    let dataset = data.join("prompts.jsonl");
    let names = load_rubrics(&rubrics)?.into_keys().collect();
    let rows = read_dataset(&dataset, &names)?;
    let settings = SimSettings {
        faults: FaultProfile::load(&data.join("faults.toml"))?,
        ttft_ms: 20,
        latency_sigma: 0.5,
        ..SimSettings::default()
    };
    let sim = spawn(settings, &rows, "127.0.0.1:0".parse().expect("an address"))?;
    println(&format!(
        "serve-sim: {} prompts on http://{}/v1 with {} (20% faults)",
        rows.len(),
        sim.address,
        data.join("faults.toml").display()
    ))?;
    let config = out.join("routeval.toml");
    crate::client::point_run_config_at(
        &data.join("routeval.toml"),
        &format!("http://{}/v1", sim.address),
        &config,
    )?;
    let path = |name: &str| out.join(name);
    let run_dir = path("run");
    let graded = path("graded.parquet");
    let scored = path("graded-scored.parquet");
    run_with_retries(&config, &dataset, &rubrics, &run_dir)?;
    grade_and_train(&run_dir, &rubrics, &graded, &path("router.bin"), &scored)?;
    let target = args_in.target.to_string();
    calibrate_each(&scored, &target, &path)?;
    let (gated, signed, gate_dir) = gate_and_verify(data, &rubrics, &scored, &target, &path)?;
    report(&scored, &path, &gate_dir, &report_dir)?;
    let stats = sim.stats();
    println(&format!(
        "\nserve-sim received {} requests ({} faults injected)",
        stats.requests,
        stats.faults.values().sum::<u64>()
    ))?;
    if let Some(signed) = signed {
        println(&format!("signed route config: {}", signed.display()))?;
        println(&serve_hint(&signed, &dataset, &rubrics)?)?;
    }
    println(&format!(
        "report: {}",
        report_dir.join("report.html").display()
    ))?;
    println(&format!(
        "demo finished in {:.1} s",
        started.elapsed().as_secs_f64()
    ))?;
    Ok(gated)
}

/// What to start before serving the signed config: the tables name their
/// endpoints (the demo's: where `routeval serve-sim` listens by default),
/// and the demo's own serve-sim ran on a free port and is gone.
fn serve_hint(signed: &Path, dataset: &Path, rubrics: &Path) -> anyhow::Result<String> {
    Ok(format!(
        "its routes call {}: start `routeval serve-sim --dataset {} --rubrics {}` there before serving it (docs/serve.md); docs/gate.md says how to point a table at your own upstream",
        route_urls(signed)?.join(", "),
        dataset.display(),
        rubrics.display()
    ))
}

/// The run, and once more with `--retry-errors` for the calls that
/// exhausted their retries under the faults, as a user would, rather than
/// grading a table with holes.
fn run_with_retries(
    config: &Path,
    dataset: &Path,
    rubrics: &Path,
    run_dir: &Path,
) -> anyhow::Result<()> {
    let mut run = args(&[
        &"run",
        &"--config",
        &config,
        &"--dataset",
        &dataset,
        &"--rubrics",
        &rubrics,
        &"--out",
        &run_dir,
        &"--no-cache",
        &"--quiet",
    ]);
    // serve-sim's faults are the demo's own: calls that exhaust their
    // retries under them are expected, and sent again below.
    let mut ran = step_with(
        "run: every prompt to sim-small, sim-mid and sim-large, small and mid answers to sim-verifier",
        &run,
        |cli| {
            if let super::Command::Run(args) = &mut cli.command {
                args.failed_calls_note = Some(
                    "expected under the faults serve-sim injects into 20% of calls; the demo sends them again".to_owned(),
                );
            }
        },
    )?;
    if ran == Outcome::CheckFailed {
        run.push("--retry-errors".into());
        ran = step(
            "run --retry-errors: the calls that failed, sent again",
            &run,
        )?;
    }
    if ran == Outcome::CheckFailed {
        anyhow::bail!(
            "the demo's run still has failed calls (see {}); the demo stops before grading a table with holes",
            run_dir.display()
        );
    }
    Ok(())
}

/// Grading, and the router fitted on a training part of the grades, its
/// scores of the calibration part written beside the verifier's.
fn grade_and_train(
    run_dir: &Path,
    rubrics: &Path,
    graded: &Path,
    router: &Path,
    scored: &Path,
) -> anyhow::Result<()> {
    step(
        "grade: rubrics decide which answers are acceptable",
        &args(&[
            &"grade",
            &"--run",
            &run_dir,
            &"--rubrics",
            &rubrics,
            &"--out",
            &graded,
        ]),
    )?;
    step(
        "router train: fitted on half the prompts, its scores of the other half (the calibration part) beside the verifier's",
        &args(&[
            &"router",
            &"train",
            &"--results",
            &graded,
            &"--out",
            &router,
            &"--scored-out",
            &scored,
            &"--into",
            &"router_score",
        ]),
    )?;
    Ok(())
}

/// The four calibrations: predictive plain and certified, cascade, and
/// three tiers.
fn calibrate_each(
    scored: &Path,
    target: &str,
    path: &dyn Fn(&str) -> PathBuf,
) -> anyhow::Result<()> {
    // Each calibration differs from the others only in these flags.
    let calibrate = |title: &str, flags: &[&str], out: &str| {
        let mut arguments = args(&[
            &"calibrate",
            &"--results",
            &scored,
            &"--target",
            &target,
            &"--out",
            &path(out),
        ]);
        arguments.extend(flags.iter().map(OsString::from));
        step(title, &arguments)
    };
    // The graded file names its three tiers; the two-tier policies name
    // the pair they route between.
    let two_tiers = ["--tiers", "small,large"];
    calibrate(
        "calibrate (predictive, plain): the cheapest router threshold per slice",
        &[&two_tiers[..], &["--score-col", "router_score"]].concat(),
        "calibration-predictive.json",
    )?;
    calibrate(
        "calibrate (predictive, 90% guarantee)",
        &[
            &two_tiers[..],
            &["--score-col", "router_score", "--confidence", "0.9"],
        ]
        .concat(),
        "calibration-predictive-certified.json",
    )?;
    calibrate(
        "calibrate (cascade): the verifier threshold per slice",
        &[&two_tiers[..], &["--policy", "cascade"]].concat(),
        "calibration-cascade.json",
    )?;
    calibrate(
        "calibrate (predictive, three tiers): two router thresholds per slice, small | mid | large",
        &["--tiers", "small,mid,large", "--score-col", "router_score"],
        "calibration-predictive-three-tier.json",
    )?;
    Ok(())
}

/// A throwaway key, the gate over the demo's candidates, and the signed
/// config verified as a deploy would: the gate's outcome, the signed config
/// and the gate's directory.
fn gate_and_verify(
    data: &Path,
    rubrics: &Path,
    scored: &Path,
    target: &str,
    path: &dyn Fn(&str) -> PathBuf,
) -> anyhow::Result<(Outcome, Option<PathBuf>, PathBuf)> {
    let key = path("keys/demo.key");
    std::fs::create_dir_all(path("keys"))?;
    step(
        "keygen: a throwaway signing key",
        &args(&[&"keygen", &"--out", &key]),
    )?;
    let gate_dir = path("gate");
    let gated = step(
        "gate: cascade, predictive, three-tier predictive and large-only on the same graded results",
        &args(&[
            &"gate",
            &"--candidates",
            &data.join("routes/cascade.toml"),
            &data.join("routes/predictive.toml"),
            &data.join("routes/predictive-three-tier.toml"),
            &data.join("routes/large-only.toml"),
            &"--results",
            &scored,
            &"--calibration",
            &path("calibration-cascade.json"),
            &path("calibration-predictive.json"),
            &path("calibration-predictive-three-tier.json"),
            &"--target",
            &target,
            &"--router",
            &path("router.bin"),
            &"--rubrics",
            &rubrics,
            &"--key",
            &key,
            // The LiteLLM export sends the logical model to `routeval
            // serve --listen 127.0.0.1:8090`, which carries the policy out.
            &"--serve-url",
            &"http://127.0.0.1:8090/v1",
            &"--out",
            &gate_dir,
        ]),
    )?;
    let signed = signed_config(&gate_dir)?;
    if let Some(signed) = &signed {
        step(
            "verify: the signed route config, as a deploy would",
            &args(&[
                &"verify",
                signed,
                &"--pubkey",
                &key.with_extension("key.pub"),
            ]),
        )?;
    }
    Ok((gated, signed, gate_dir))
}

/// The report a reviewer reads.
fn report(
    scored: &Path,
    path: &dyn Fn(&str) -> PathBuf,
    gate_dir: &Path,
    report_dir: &Path,
) -> anyhow::Result<()> {
    step(
        "report: what a reviewer reads",
        &args(&[
            &"report",
            &"--results",
            &scored,
            &"--calibration",
            &path("calibration-cascade.json"),
            &path("calibration-predictive.json"),
            &path("calibration-predictive-certified.json"),
            &path("calibration-predictive-three-tier.json"),
            &"--gate",
            &gate_dir.join("gate-report.json"),
            &"--out",
            &report_dir,
        ]),
    )?;
    Ok(())
}

/// The file that marks a directory as the demo's own, so that a later demo
/// may clear it and nothing else.
pub const DEMO_MARKER: &str = ".routeval-demo";

/// Every file and folder the demo writes at the top of its `--out`: what a
/// later demo clears there, and all it clears.
pub const DEMO_OUTPUTS: [&str; 13] = [
    "inputs",
    "routeval.toml",
    "run",
    "graded.parquet",
    "graded-scored.parquet",
    "router.bin",
    "calibration-cascade.json",
    "calibration-predictive.json",
    "calibration-predictive-certified.json",
    "calibration-predictive-three-tier.json",
    "keys",
    "gate",
    "report",
];

/// The endpoints a signed config's routes call, each once.
fn route_urls(config: &Path) -> anyhow::Result<Vec<String>> {
    let config: RouteConfig = read_document(config, "a route config", None)?.document;
    let mut urls: Vec<String> = config
        .table
        .routes
        .iter()
        .filter_map(|route| route.base_url.clone())
        .collect();
    urls.sort();
    urls.dedup();
    Ok(urls)
}

/// `--out`: a fresh start each time, because the simulator's port (part
/// of the run's config) changes between demos.
const DEMO_DIRECTORY: OwnedDirectory<'static> = OwnedDirectory {
    owner: "the demo",
    flag: "--out",
    marker: DEMO_MARKER,
    marker_text: "made by routeval demo; the next demo with this --out removes what the demo wrote here, and nothing else\n",
    outputs: &DEMO_OUTPUTS,
};

/// The route config the gate signed, if it passed a candidate: as its
/// report names it.
fn signed_config(gate_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let report: GateReport =
        read_document(&gate_dir.join(GATE_REPORT_FILE), "a gate report", None)?.document;
    Ok(report.emitted.map(|emitted| PathBuf::from(emitted.config)))
}
