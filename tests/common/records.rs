//! Request records of a brown-out day and a route table with a fallback.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn table_with_fallback(directory: &Path) -> PathBuf {
    let route = |name: &str, region: &str| {
        format!(
            "[[routes]]\nname = \"{name}\"\nprovider = \"openai\"\nmodel = \"gpt-4o-2024-08-06\"\nregion = \"{region}\"\ntier = \"large\"\nprompt_variant = \"support-v3\"\nprice_input_per_mtok = 3.0\nprice_output_per_mtok = 15.0\nrpm = 600\ntpm = 30000000\n\n"
        )
    };
    let text = format!(
        "# The primary and its fallback in another region.\nlogical_model = \"support-fast\"\n\n{}{}[policy.single]\nroute = \"primary\"\n\n[[fallbacks]]\nroute = \"primary\"\nto = [\"backup\"]\n\n[serving]\nunknown_slice = \"global\"\n",
        route("primary", "eu-west-1"),
        route("backup", "eu-central-1"),
    );
    let path = directory.join("routes.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Brown-outs of `primary` in a day of traffic, with `backup`'s records.
pub fn write_day(path: &Path) {
    let mut lines = Vec::new();
    for index in 0..2000u64 {
        let browning = (index % 400) >= 300 && (index % 400) < 340;
        let ttft = if browning {
            6000.0 + (index % 5) as f64 * 1000.0
        } else {
            300.0 + (index % 17) as f64 * 40.0
        };
        for (route, ttft) in [
            ("primary", ttft),
            ("backup", 700.0 + (index % 3) as f64 * 100.0),
        ] {
            lines.push(
                serde_json::json!({
                    "id": format!("{route}-{index}"),
                    "timestamp": 1_764_504_000_000u64 + index * 1000,
                    "slice": "support",
                    "route": route,
                    "status": 200,
                    "input_tokens": 800,
                    "output_tokens": 200,
                    "ttft_ms": ttft,
                    "total_ms": ttft + 1500.0,
                })
                .to_string(),
            );
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Records of the example results' rows at the signed config's thresholds:
/// the routing decision from each row's score, `shift` added to the
/// scores of slice `moved`, one a second from `first_ms`.
pub fn records_from_results(
    config: &Path,
    path: &Path,
    moved: &str,
    shift: f64,
    first_ms: u64,
) -> (BTreeMap<String, f64>, Vec<String>) {
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(config).unwrap()).unwrap();
    let thresholds: BTreeMap<String, f64> =
        config["table"]["policy"]["predictive"]["thresholds"]["slices"]
            .as_object()
            .unwrap()
            .iter()
            // A slice that never escalates has the threshold "inf".
            .map(|(slice, value)| (slice.clone(), value.as_f64().unwrap_or(f64::INFINITY)))
            .collect();
    let routes = &config["table"]["routes"];
    let pinned = |name: &str| {
        routes
            .as_array()
            .unwrap()
            .iter()
            .find(|route| route["name"] == name)
            .unwrap()["model"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|column| *column == name).unwrap();
    let (id, slice, score, ttft) = (
        column("id"),
        column("slice"),
        column("score"),
        column("small_ttft_ms"),
    );
    let mut records = Vec::new();
    for (index, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split(',').collect();
        let name = fields[slice];
        let mut value: f64 = fields[score].parse().unwrap();
        if name == moved {
            value = (value + shift).min(1.0);
        }
        let large = value >= thresholds[name];
        let route = if large { "large" } else { "mini" };
        records.push(
            serde_json::json!({
                "id": fields[id],
                "timestamp": first_ms + index as u64 * 1000,
                "slice": name,
                "logical_model": "support-fast",
                "route": route,
                "model": pinned(route),
                "reason": if large { "routed-large" } else { "routed-small" },
                "score": value,
                "status": "ok",
                "ttft_ms": fields[ttft].parse::<f64>().unwrap(),
                "cost_usd": 0.001,
            })
            .to_string(),
        );
    }
    (thresholds, records)
}
