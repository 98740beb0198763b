//! routeval's LiteLLM export in a real LiteLLM proxy (`litellm[proxy]`, no
//! database), and the proxy's own records read back. The proxy stands in
//! front of two serve-sim instances, a primary with a `[routes.breaker]`
//! and a backup it falls back to, through four phases: clean, a 30% mix of
//! faults, a brown-out (60% of first tokens 4 s late) and the primary
//! down. Its spend-log rows are captured through its own cost logger (only
//! the database insert replaced) and its StandardLoggingPayloads through a
//! logger callback; both import, and every imported field is checked
//! against what the OpenAI client saw. The same export pointed at
//! `routeval serve` spreads the logical model's requests over the tiers as
//! the signed policy does.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;

use serde_json::Value;

use routeval::schema::{FallbackDocument, read_dataset};
use routeval::upstream_sim::{FaultProfile, RunningSim, SimSettings, spawn};

use crate::common::{
    KEY, Pipeline, Proxy, column, falling_back, gate_single, proxy_python, repo, routeval,
    write_keys,
};

const DEADLINE_MS: f64 = 1_500.0;
const OPEN_AFTER: usize = 3;
const CONCURRENCY: usize = 6;

/// The large route's breaker, as the export maps it onto LiteLLM.
fn breaker() -> String {
    format!(
        "\n[routes.breaker]\nfirst_token_deadline_ms = {DEADLINE_MS:.1}\nopen_after = {OPEN_AFTER}\nopen_ms = 5000.0\n"
    )
}

fn sim(address: SocketAddr, faults: FaultProfile, ttft_ms: u64) -> RunningSim {
    let names = routeval::rubric::load_rubrics(&repo().join("rubrics"))
        .unwrap()
        .into_keys()
        .collect();
    let rows = read_dataset(&repo().join("datasets/demo/prompts.jsonl"), &names).unwrap();
    let settings = SimSettings {
        ttft_ms,
        tokens_per_second: 400.0,
        faults,
        ..SimSettings::default()
    };
    // A port just released can take a moment to bind again.
    for _ in 0..50 {
        if let Ok(sim) = spawn(settings.clone(), &rows, address) {
            return sim;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("serve-sim cannot listen on {address} again");
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The records an import of `rows` (capture lines) writes, by id.
fn imported(
    directory: &Path,
    from: &str,
    name: &str,
    rows: &[String],
    config: &Path,
) -> BTreeMap<String, Value> {
    let input = directory.join(format!("{name}.jsonl"));
    std::fs::write(&input, rows.join("\n") + "\n").unwrap();
    let out = directory.join(format!("{name}.parquet"));
    let output = routeval()
        .args(["records", "import", "--from", from, "--input"])
        .arg(&input)
        .arg("--config")
        .arg(config)
        .args([
            "--slice-field",
            "metadata.spend_logs_metadata.slice",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{from}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names = [
        "id",
        "slice",
        "logical_model",
        "route",
        "model",
        "reason",
        "status",
        "input_tokens",
        "output_tokens",
        "ttft_ms",
        "total_ms",
        "timestamp",
        "config_version",
    ];
    let columns: Vec<Vec<Value>> = names.iter().map(|name| column(&out, name)).collect();
    let mut records = BTreeMap::new();
    for index in 0..columns[0].len() {
        let record: serde_json::Map<String, Value> = names
            .iter()
            .zip(&columns)
            .map(|(name, values)| ((*name).to_owned(), values[index].clone()))
            .collect();
        let id = record["id"].as_str().unwrap().to_owned();
        assert!(
            records.insert(id.clone(), Value::Object(record)).is_none(),
            "{id} twice"
        );
    }
    records
}

/// The requests of the failing phase (the primary past its deadline, the
/// backup gone): LiteLLM wrote the attempts it billed under rows of their
/// own (`ID-attempt-0`) beside the request's. Each failed request is one
/// record with its attempts folded in, and still one when its own row is
/// missing (a proxy whose database took the attempts' rows only).
fn failed_requests(directory: &Path, config: &Path, client: &[Value], rows: &[String]) {
    let request_of = |row: &String| -> String {
        let row: Value = serde_json::from_str(row).unwrap();
        row["request_id"].as_str().unwrap().to_owned()
    };
    let billed: BTreeMap<String, usize> =
        rows.iter()
            .map(request_of)
            .fold(BTreeMap::new(), |mut billed, id| {
                if let Some((request, _)) = id.rsplit_once("-attempt-") {
                    *billed.entry(request.to_owned()).or_default() += 1;
                }
                billed
            });
    assert!(billed.len() >= 3, "too few billed attempts: {billed:?}");
    let failed: BTreeMap<&str, &Value> = client
        .iter()
        .filter(|request| request["phase"] == "failing" && request["status"] != 200)
        .map(|request| (request["call_id"].as_str().unwrap(), request))
        .collect();
    let attempts_only: Vec<String> = rows
        .iter()
        .filter(|row| !billed.contains_key(&request_of(row)))
        .cloned()
        .collect();
    for (name, rows) in [("failing", rows.to_vec()), ("attempts-only", attempts_only)] {
        let records = imported(directory, "litellm", name, &rows, config);
        for request in billed.keys() {
            let context = format!("{name}: {request} in {records:?}");
            assert!(failed.contains_key(request.as_str()), "{context}");
            let record = &records[request];
            assert_ne!(record["status"], "ok", "{context}");
            assert_eq!(record["route"], "large", "{context}");
            assert_eq!(record["config_version"], 1.0, "{context}");
            assert!(
                records
                    .keys()
                    .all(|id| !id.starts_with(&format!("{request}-attempt-"))
                        || id == &format!("{request}-attempt-1")),
                "{context}"
            );
        }
    }
}

fn route_of_deployment(deployment: &str) -> &str {
    deployment.rsplit(['/', '#']).next().unwrap_or(deployment)
}

/// Each client request against its record of one import: one record per
/// request, and every field the client can see.
fn check_against_client(from: &str, client: &[Value], records: &BTreeMap<String, Value>) {
    let own: Vec<&Value> = records
        .values()
        .filter(|record| {
            !record["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with("abandoned:")
        })
        .collect();
    assert_eq!(own.len(), client.len(), "{from}: one record per request");
    let mut behind = Vec::new();
    for request in client {
        let ok = request["status"] == 200;
        let id = if ok {
            request["id"].as_str().unwrap()
        } else {
            request["call_id"].as_str().unwrap()
        };
        let record = records
            .get(id)
            .unwrap_or_else(|| panic!("{from}: no record of {request}"));
        let context = format!("{from}: {record} for {request}");
        assert_eq!(record["logical_model"], "support-assistant", "{context}");
        assert_eq!(record["slice"], request["slice"], "{context}");
        assert_eq!(record["config_version"], 1.0, "{context}");
        // A failed request is on a route of the table (where no deployment
        // was tried, the one it would have gone to first), and names no
        // model but one that was called: never one of the proxy's names.
        assert!(
            ["large", "backup"].contains(&record["route"].as_str().unwrap()),
            "{context}"
        );
        if !ok {
            assert_ne!(record["status"], "ok", "{context}");
            assert!(
                record["model"].is_null() || record["model"].as_str().unwrap().starts_with("sim-"),
                "{context}"
            );
            continue;
        }
        assert_eq!(record["status"], "ok", "{context}");
        let route = route_of_deployment(request["model_id"].as_str().unwrap());
        assert_eq!(record["route"], route, "{context}");
        let model = if route == "large" {
            "sim-large-2026-11-01"
        } else {
            "sim-small-2026-11-01"
        };
        assert_eq!(record["model"], model, "{context}");
        assert_eq!(
            record["input_tokens"],
            request["prompt_tokens"].as_f64().unwrap(),
            "{context}"
        );
        assert_eq!(
            record["output_tokens"],
            request["completion_tokens"].as_f64().unwrap(),
            "{context}"
        );
        let fell_back = request["attempted_fallbacks"].as_str().unwrap_or("0") != "0";
        let reason = record["reason"].as_str().unwrap_or_default();
        assert_eq!(reason.starts_with("fallback:"), fell_back, "{context}");
        // A request LiteLLM's cooldown moved without a try left no attempt
        // (the StandardLoggingPayload says so; a spend row cannot).
        if fell_back && reason != "fallback:breaker" {
            let attempt = &records[&format!("{id}-attempt-1")];
            assert_eq!(attempt["route"], "large", "{context}: {attempt}");
            assert_ne!(attempt["status"], "ok", "{context}: {attempt}");
        }
        // An answer that did not stream has no first token LiteLLM
        // measured (its completionStartTime is its end): none is recorded.
        if request["stream"] != true {
            assert_eq!(record["ttft_ms"], serde_json::Value::Null, "{context}");
            continue;
        }
        // The proxy sees a first token before the client does, by its own
        // overhead and the loopback.
        let ttft = record["ttft_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("{context}: no first token"));
        let client_ttft = request["ttft_ms"].as_f64().unwrap();
        assert!(ttft <= client_ttft + 20.0, "{context}");
        behind.push(client_ttft - ttft);
    }
    // The proxy's first requests wait for its warm-up; the rest differ by
    // the overhead alone.
    behind.sort_by(f64::total_cmp);
    let median = behind[behind.len() / 2];
    assert!(
        median < 200.0,
        "{from}: the client's first token {median} ms after the record's"
    );
}

/// The export run in a real LiteLLM proxy, phase by phase (warm-up, clean,
/// mixed faults, a brown-out, the primary down, the primary failing with
/// the backup gone, both down), what its client saw, what the proxy
/// logged (spend rows and StandardLoggingPayloads, with each phase's range),
/// and both imported as records: the fixture the tests below read.
struct ProxyRun {
    config: std::path::PathBuf,
    /// Where the tests import their records, each under a name of its own.
    directory: std::path::PathBuf,
    client: Vec<Value>,
    spend: Vec<String>,
    standard: Vec<String>,
    captured: HashMap<String, (Range<usize>, Range<usize>)>,
    spend_records: BTreeMap<String, Value>,
    standard_records: BTreeMap<String, Value>,
    _pipeline: Pipeline,
}

impl ProxyRun {
    /// The run, made by the first test to ask; `None` (the test says it
    /// was skipped) without the proxy's Python.
    fn shared(what: &str) -> Option<&'static ProxyRun> {
        static SHARED: std::sync::OnceLock<ProxyRun> = std::sync::OnceLock::new();
        let python = proxy_python(what)?;
        Some(SHARED.get_or_init(|| ProxyRun::run(&python)))
    }

    fn run(python: &std::ffi::OsStr) -> ProxyRun {
        let pipeline = Pipeline::new();
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (primary_address, backup_address) = (free(), free());
        let mut primary = Some(sim(primary_address, FaultProfile::default(), 20));
        let mut backup = Some(sim(backup_address, FaultProfile::default(), 30));
        let table_path = pipeline.path("falling-back.toml");
        std::fs::write(
            &table_path,
            falling_back(
                &format!("http://{primary_address}/v1"),
                &format!("http://{backup_address}/v1"),
                &breaker(),
                20_000,
            ),
        )
        .unwrap();
        let out = pipeline.path("gated");
        gate_single(&pipeline, &table_path, &out, None, false)
            .assert()
            .success();
        let config = out.join("route-config.v1.json");
        let export = out.join("route-config.v1.litellm.yaml");
        let proxy = Proxy::start(
            python,
            &export,
            &pipeline.path("proxy"),
            &[("ROUTEVAL_SIM_KEY", "sk-sim")],
        );
        let prompts = repo().join("datasets/demo/prompts.jsonl");
        let client_path = pipeline.path("client.jsonl");

        // Each phase: the primary as the phase has it, the requests, and where
        // the captures stood after it.
        let mixed = FaultProfile {
            server_error: 0.1,
            rate_limit: 0.1,
            unavailable: 0.05,
            slow_first_token: 0.05,
            slow_first_token_ms: 4_000,
            ..FaultProfile::default()
        };
        let brown_out = FaultProfile {
            slow_first_token: 0.6,
            slow_first_token_ms: 4_000,
            ..FaultProfile::default()
        };
        // A proxy's first requests wait on its own warm-up (imports, client
        // pools), seconds on a loaded machine: a warm-up phase takes them, as a
        // deployed proxy has long since, so that the clean phase is clean.
        // Then requests fail: the primary slow past its deadline with the
        // backup gone (LiteLLM bills the abandoned attempts), and both gone
        // (once the primary cools down, the router refuses without a try).
        let slow = FaultProfile {
            slow_first_token: 1.0,
            slow_first_token_ms: 4_000,
            ..FaultProfile::default()
        };
        let phases: [(&str, Option<FaultProfile>, usize); 7] = [
            ("warm-up", None, 12),
            ("clean", None, 60),
            ("mixed", Some(mixed), 60),
            ("brown-out", Some(brown_out), 60),
            ("down", None, 40),
            ("failing", Some(slow), 24),
            ("all-down", None, 20),
        ];
        // Each phase's captures: its spend rows and its StandardLoggingPayloads.
        let mut captured: HashMap<String, (Range<usize>, Range<usize>)> = HashMap::new();
        let mut ends = (0, 0);
        for (phase, faults, count) in &phases {
            if *phase == "brown-out" {
                // The mixed phase's last failures may have cooled the primary
                // down: the brown-out, every request then moved at once to the
                // backup, could end before the cooldown and never reach it.
                std::thread::sleep(std::time::Duration::from_secs(6));
            }
            if *phase == "failing" {
                drop(backup.take());
                // The primary's cooldown from the phase before runs out.
                std::thread::sleep(std::time::Duration::from_secs(6));
            }
            if let Some(faults) = faults {
                drop(primary.take());
                primary = Some(sim(primary_address, faults.clone(), 20));
            } else if *phase == "down" || *phase == "all-down" {
                drop(primary.take());
            }
            proxy.drive(
                "support-assistant",
                &prompts,
                phase,
                *count,
                CONCURRENCY,
                &client_path,
            );
            // The proxy logs after it answers.
            std::thread::sleep(std::time::Duration::from_secs(2));
            let now = (
                proxy.captured("spend.jsonl").len(),
                proxy.captured("standard.jsonl").len(),
            );
            captured.insert((*phase).to_owned(), (ends.0..now.0, ends.1..now.1));
            ends = now;
        }
        let client = lines(&client_path);
        let spend = proxy.captured("spend.jsonl");
        let standard = proxy.captured("standard.jsonl");
        drop(proxy);
        let directory = pipeline.path("imports");
        std::fs::create_dir_all(&directory).unwrap();
        let spend_records = imported(&directory, "litellm", "spend", &spend, &config);
        let standard_records = imported(
            &directory,
            "litellm-standard",
            "standard",
            &standard,
            &config,
        );
        ProxyRun {
            config,
            directory,
            client,
            spend,
            standard,
            captured,
            spend_records,
            standard_records,
            _pipeline: pipeline,
        }
    }

    fn of_phase(&self, phase: &str) -> Vec<&Value> {
        self.client
            .iter()
            .filter(|request| request["phase"] == phase)
            .collect()
    }

    /// The spend rows and the StandardLoggingPayloads of `phase`.
    fn phase_rows(&self, phase: &str) -> (&[String], &[String]) {
        let (spend, standard) = &self.captured[phase];
        (&self.spend[spend.clone()], &self.standard[standard.clone()])
    }
}

#[test]
fn every_request_through_litellm_reads_back_as_its_client_saw_it() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    check_against_client("spend rows", &run.client, &run.spend_records);
    check_against_client("StandardLoggingPayload", &run.client, &run.standard_records);
}

#[test]
fn through_litellm_a_late_first_token_moves_to_the_backup_at_the_tables_deadline() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    let standard_records = &run.standard_records;
    // The exported settings in the proxy: a stream whose first token is
    // late moves to the backup at the table's deadline, not after LiteLLM's
    // retries (the backup answers in tens of milliseconds).
    let brown = run.of_phase("brown-out");
    let moved: Vec<f64> = brown
        .iter()
        .filter(|request| {
            request["stream"] == true
                && request["model_id"]
                    .as_str()
                    .is_some_and(|id| id.ends_with("backup"))
        })
        .map(|request| request["ttft_ms"].as_f64().unwrap())
        .collect();
    assert!(moved.len() >= 5, "{brown:?}");
    assert!(
        moved.iter().all(|&ttft| ttft < DEADLINE_MS + 1_000.0),
        "streams that fell back waited {moved:?}"
    );
    // StandardLoggingPayload times the abandoned attempt: the deadline.
    for (id, attempt) in standard_records {
        if id.ends_with("-attempt-1") && attempt["status"] == "timeout" {
            let moved_at = attempt["total_ms"].as_f64().unwrap();
            assert!(
                (DEADLINE_MS - 50.0..DEADLINE_MS + 800.0).contains(&moved_at),
                "{attempt}"
            );
        }
    }
}

#[test]
fn through_litellm_a_dead_primary_is_cooled_down() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    // A dead primary is cooled down: after `open_after` failures (and what
    // was already in flight) requests go to the backup without a try.
    let down = run.of_phase("down");
    assert!(
        down.iter().all(|request| request["status"] == 200),
        "{down:?}"
    );
    let down_standard = run.phase_rows("down").1;
    let down_records = imported(
        &run.directory,
        "litellm-standard",
        "down",
        down_standard,
        &run.config,
    );
    let tried_dead = down_records
        .values()
        .filter(|record| record["route"] == "large")
        .count();
    let cooled = down_records
        .values()
        .filter(|record| record["reason"] == "fallback:breaker")
        .count();
    assert!(
        cooled >= down.len() / 2,
        "{cooled} of {} moved by the cooldown",
        down.len()
    );
    assert!(
        tried_dead <= OPEN_AFTER + CONCURRENCY && tried_dead < down.len() / 2,
        "{tried_dead} of {} requests tried the dead primary",
        down.len()
    );
}

#[test]
fn through_litellm_failed_requests_are_billed_and_refusals_name_the_logical_model() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    failed_requests(
        &run.directory,
        &run.config,
        &run.client,
        run.phase_rows("failing").0,
    );
    // Once every deployment cooled down, the router refused without a try,
    // as an open breaker with no fallback does; the row names the logical
    // model where a deployment would be.
    for (from, records) in [
        ("spend rows", &run.spend_records),
        ("StandardLoggingPayload", &run.standard_records),
    ] {
        let refused: Vec<&Value> = records
            .values()
            .filter(|record| record["reason"] == "breaker-open")
            .collect();
        assert!(refused.len() >= 5, "{from}: {refused:?}");
        for record in refused {
            assert_eq!(record["route"], "large", "{from}: {record}");
            assert_eq!(record["model"], Value::Null, "{from}: {record}");
            assert_ne!(record["status"], "ok", "{from}: {record}");
        }
    }
}

#[test]
fn drift_on_litellms_records_is_quiet_on_the_clean_phase_and_not_on_the_brown_out() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    // drift on the clean phase's records raises nothing; on the brown-out's
    // it does.
    let drift = |name: &str, rows: &[String]| -> Value {
        imported(&run.directory, "litellm-standard", name, rows, &run.config);
        let output = routeval()
            .args(["drift", "--config"])
            .arg(&run.config)
            .arg("--records")
            .arg(run.directory.join(format!("{name}.parquet")))
            .args(["--window", "10s", "--json"])
            .output()
            .unwrap();
        assert!(
            output.status.code().unwrap() < 2,
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let clean = drift("clean", run.phase_rows("clean").1);
    assert_eq!(clean["verdict"], "ok", "{clean}");
    let brown_drift = drift("brown-out", run.phase_rows("brown-out").1);
    assert_ne!(brown_drift["verdict"], "ok", "{brown_drift}");
}

#[test]
fn the_breaker_search_on_litellms_brown_out_falls_back_timed_by_the_attempts() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    imported(
        &run.directory,
        "litellm-standard",
        "brown-out-search",
        run.phase_rows("brown-out").1,
        &run.config,
    );
    // The breaker search on the brown-out's records, allowed to move as
    // many requests as the brown-out slows, chooses one that falls back,
    // timing the backup by the attempts the requests left.
    let output = routeval()
        .args(["replay", "fallback", "--records"])
        .arg(run.directory.join("brown-out-search.parquet"))
        .args([
            "--route",
            "large",
            "--fallback",
            "backup",
            "--calibrate",
            "--json",
        ])
        .args(["--max-fallback-share", "1", "--retry-budget", "1"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let replay: FallbackDocument = serde_json::from_slice(&output.stdout).unwrap();
    let source = replay.fallback_latency.unwrap();
    assert!(
        source.moved_timed > 0 && source.moved_untimed == 0,
        "{source:?}"
    );
    let chosen = replay
        .calibration
        .as_ref()
        .unwrap()
        .chosen
        .as_ref()
        .unwrap();
    assert!(chosen.fallback_share > 0.0, "{chosen:?}");
    let never = replay
        .policies
        .iter()
        .find(|policy| policy.name == "no-breaker")
        .unwrap();
    assert!(chosen.p95_wait_s < never.p95_wait_s, "{chosen:?} {never:?}");
    let value = serde_json::to_value(&replay).unwrap();
    let missing =
        crate::common::undocumented_keys("## fallback.json", &[&value["fallback_latency"]]);
    assert!(missing.is_empty(), "not in docs/schema.md: {missing:?}");
}

#[test]
fn from_litellms_spend_rows_the_replay_will_not_guess_the_backups_time() {
    let Some(run) = ProxyRun::shared("a real LiteLLM proxy") else {
        return;
    };
    // From spend rows the abandoned attempts have no time, and the replay
    // says it cannot time the backup rather than guess.
    let brown_spend = run.phase_rows("brown-out").0;
    imported(
        &run.directory,
        "litellm",
        "brown-out-spend",
        brown_spend,
        &run.config,
    );
    let output = routeval()
        .args(["replay", "fallback", "--records"])
        .arg(run.directory.join("brown-out-spend.parquet"))
        .args(["--route", "large", "--fallback", "backup"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--from litellm-standard"), "{stderr}");
}

#[test]
fn the_logical_model_through_litellm_is_served_as_serve_serves_it() {
    let Some(python) = proxy_python("a real LiteLLM proxy in front of routeval serve") else {
        return;
    };
    let pipeline = Pipeline::new();
    let sim = crate::common::start_sim(
        &repo().join("datasets/demo/prompts.jsonl"),
        SimSettings {
            seed: 7,
            ..SimSettings::default()
        },
    );
    let url = crate::common::base_url(&sim);
    // The demo's predictive table (its slice from the x-routeval-slice
    // header, which the export has LiteLLM pass on), gated with the export
    // sent to serve.
    let text = std::fs::read_to_string(repo().join("datasets/demo/routes/predictive.toml"))
        .unwrap()
        .replace("http://127.0.0.1:8089/v1", &url);
    let candidate = pipeline.path("predictive.toml");
    std::fs::write(&candidate, text).unwrap();
    let keys = pipeline.path("keys.toml");
    write_keys(&keys);
    let records = pipeline.path("records");
    let out = pipeline.path("gated");
    // The export names serve's URL, so serve's port is chosen first.
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    gate_single(&pipeline, &candidate, &out, None, true)
        .args(["--serve-url", &format!("http://{listen}/v1")])
        .assert()
        .success();
    let mut command = std::process::Command::new(crate::common::binary());
    command
        .arg("serve")
        .arg("--config")
        .arg(out.join("route-config.v1.json"))
        .arg("--pubkey")
        .arg(pipeline.out.join("keys/demo.key.pub"))
        .arg("--router")
        .arg(pipeline.out.join("router.bin"))
        .arg("--keys")
        .arg(&keys)
        .arg("--records")
        .arg(&records)
        .args(["--listen", &listen.to_string(), "--trust-slice-header"])
        .env("ROUTEVAL_SIM_KEY", "unused-by-serve-sim");
    let served = crate::common::Served::start(&mut command);
    let export = out.join("route-config.v1.litellm.yaml");
    let proxy = Proxy::start(
        &python,
        &export,
        &pipeline.path("proxy"),
        &[("ROUTEVAL_SERVE_KEY", KEY), ("ROUTEVAL_SIM_KEY", "sk-sim")],
    );
    let prompts = repo().join("datasets/demo/prompts.jsonl");
    let count = std::fs::read_to_string(&prompts).unwrap().lines().count();
    let client_path = pipeline.path("client.jsonl");
    proxy.drive(
        "support-assistant",
        &prompts,
        "through-litellm",
        count,
        CONCURRENCY,
        &client_path,
    );
    drop(proxy);
    served.stop();
    let client = lines(&client_path);
    assert!(
        client.iter().all(|request| request["status"] == 200),
        "{client:?}"
    );
    // serve decided every request, and the shares of its routes are the
    // policy's, not one route's.
    let mut routes: HashMap<String, usize> = HashMap::new();
    let mut served_requests = 0;
    for part in routeval::records::record_parts(&records).unwrap() {
        for (route, reason) in column(&part, "route").iter().zip(column(&part, "reason")) {
            served_requests += 1;
            assert!(
                !reason
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("unknown-slice"),
                "{reason}"
            );
            *routes
                .entry(route.as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(served_requests, count);
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("gate-report.json")).unwrap()).unwrap();
    let signed_rate = report["candidates"][0]["overall"]["escalation_rate"]
        .as_f64()
        .unwrap();
    let large = routes.get("large").copied().unwrap_or(0) as f64 / count as f64;
    assert!(routes.len() >= 2, "{routes:?}");
    assert!(
        (large - signed_rate).abs() < 0.1,
        "large served {large}, signed {signed_rate}: {routes:?}"
    );
}
