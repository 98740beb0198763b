//! One policy kernel: the gate scores a table exactly as calibration
//! measured it, and `simulate --compare` serves the simulated traffic exactly
//! as the gate serves the simulated table.

use routeval::schema::CalibrationDocument;

use crate::common::{example_results, gate_report, routeval};

/// Routes for the small, large and (for cascades) verifier tiers, with the
/// given models, and `policy` as written.
fn table(models: [&str; 3], policy: &str) -> String {
    let route = |name: &str, tier: &str, model: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nprovider = \"openai\"\nmodel = \"{model}\"\nregion = \"eu-west-1\"\ntier = \"{tier}\"\nprompt_variant = \"v1\"\nprice_input_per_mtok = 1.0\nprice_output_per_mtok = 1.0\nrpm = 100000\ntpm = 100000000\n\n"
        )
    };
    format!(
        "logical_model = \"kernel\"\n\n{}{}{}{policy}\n",
        route("small", "small", models[0]),
        route("large", "large", models[1]),
        route("verifier", "verifier", models[2]),
    )
}

#[test]
fn the_gate_measures_a_calibrated_table_exactly_as_calibration_did() {
    let directory = tempfile::tempdir().unwrap();
    let models = [
        "gpt-4o-mini-2024-07-18",
        "gpt-4o-2024-08-06",
        "verifier-2024-01-01",
    ];
    for policy in ["predictive", "cascade"] {
        let calibration = directory.path().join(format!("{policy}.json"));
        routeval()
            .args([
                "calibrate",
                "--target",
                "0.85",
                "--policy",
                policy,
                "--results",
            ])
            .arg(example_results())
            .arg("--out")
            .arg(&calibration)
            .assert()
            .code(0);
        let document: CalibrationDocument =
            serde_json::from_str(&std::fs::read_to_string(&calibration).unwrap()).unwrap();
        let verifier = if policy == "cascade" {
            "verifier = \"verifier\"\n"
        } else {
            ""
        };
        let candidate = directory.path().join(format!("{policy}.toml"));
        std::fs::write(
            &candidate,
            table(
                models,
                &format!(
                    "[policy.{policy}]\nsmall = \"small\"\n{verifier}large = \"large\"\nthresholds_from_calibration = true"
                ),
            ),
        )
        .unwrap();
        let report = gate_report(
            directory.path(),
            &example_results(),
            &candidate,
            &format!("gate-{policy}"),
            &[
                "--target",
                "0.01",
                "--calibration",
                calibration.to_str().unwrap(),
            ],
        );
        let measured = &report.candidates[0].slices;
        assert_eq!(measured.len(), document.slices.len(), "{policy}");
        for (slice, metrics) in document.slices.iter().zip(measured) {
            assert!(slice.feasible, "{policy}: {} is infeasible", slice.slice);
            assert_eq!(metrics.slice, slice.slice);
            assert_eq!(metrics.n, slice.n, "{policy} {}", slice.slice);
            // Exactly, not approximately: one kernel counts both.
            assert_eq!(
                Some(metrics.quality),
                slice.quality,
                "{policy} {}",
                slice.slice
            );
            assert_eq!(
                Some(metrics.mean_cost),
                slice.mean_cost,
                "{policy} {}",
                slice.slice
            );
            assert_eq!(
                Some(metrics.escalation_rate),
                slice.escalation_rate,
                "{policy} {}",
                slice.slice
            );
        }
    }
}

#[test]
fn simulate_compare_serves_the_simulated_table_as_the_gate_does() {
    let directory = tempfile::tempdir().unwrap();
    let simulated = directory.path().join("simulated.parquet");
    routeval()
        .args(["simulate", "--requests", "5000", "--seed", "3", "--out"])
        .arg(&simulated)
        .assert()
        .code(0);
    let simulation = routeval::simulate::Simulation {
        requests: 5000,
        seed: 3,
        ..routeval::simulate::Simulation::default()
    };
    let summaries = routeval::simulate::compare(&simulation, &simulation.rows());
    let models = [
        "sim-small-2026-01-01",
        "sim-large-2026-01-01",
        "sim-verifier-2026-01-01",
    ];
    let cases = [
        ("always large", "[policy.single]\nroute = \"large\""),
        ("always small", "[policy.single]\nroute = \"small\""),
        (
            "cascade",
            "[policy.cascade]\nsmall = \"small\"\nverifier = \"verifier\"\nlarge = \"large\"\nscore = \"verifier_score\"\n[policy.cascade.thresholds]\n\"*\" = 1.0",
        ),
        (
            "predictive",
            "[policy.predictive]\nsmall = \"small\"\nlarge = \"large\"\n[policy.predictive.thresholds]\n\"*\" = 0.5",
        ),
    ];
    for (name, policy) in cases {
        let candidate = directory
            .path()
            .join(format!("{}.toml", name.replace(' ', "-")));
        std::fs::write(&candidate, table(models, policy)).unwrap();
        let report = gate_report(
            directory.path(),
            &simulated,
            &candidate,
            &format!("gate-{}", name.replace(' ', "-")),
            &["--target", "0.01"],
        );
        let gated = &report.candidates[0].overall;
        let compared = summaries
            .iter()
            .find(|summary| summary.policy == name)
            .unwrap();
        assert_eq!(gated.n, 5000);
        assert_eq!(gated.quality, compared.quality, "{name}");
        assert_eq!(gated.mean_cost * 1000.0, compared.dollars_per_1k, "{name}");
        assert_eq!(gated.p95_ms, Some(compared.p95_ttft_ms), "{name}");
        if name.starts_with("always") {
            continue;
        }
        assert_eq!(gated.escalation_rate, compared.large_share, "{name}");
    }
}
