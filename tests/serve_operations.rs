//! Operating `routeval serve`, through the binary: what it logs for each
//! event and each request (asserted by the fields of its JSON lines), what
//! `/metrics` reports (parsed by the Prometheus Python client's own
//! parser), and what its records keep of a prompt.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    KEY, Pipeline, ScriptedUpstream, Served, Step, ask_with, completion, deploy, falling_back,
    gate_single, log_events, log_lines, proxy_python, ready_at, response, run_python,
    served_records, signed_single, signed_table, write_keys,
};

/// A prompt whose words must never reach the log.
const PROMPT: &str = "the zebra umbrella question about invoices";

/// A whole completion saying `text`, as an upstream answers.
fn completed(text: &str) -> Vec<Step> {
    vec![Step::Send(response(
        "200 OK",
        &[],
        "application/json",
        &completion(text),
    ))]
}

/// A 500 with an OpenAI-style error body, as an overloaded upstream answers.
fn overloaded() -> Vec<Step> {
    let error =
        br#"{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}"#;
    vec![Step::Send(response(
        "500 Internal Server Error",
        &[],
        "application/json",
        error,
    ))]
}

/// An upstream that answers every call with a completion saying `text`,
/// and a config signed for it as `name`.
fn answering(text: &'static str, name: &str) -> (ScriptedUpstream, std::path::PathBuf) {
    let upstream = ScriptedUpstream::start(move |_| completed(text));
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), name, None);
    (upstream, config)
}

/// serve of `config` with `extra` flags, its keys and records in
/// `directory`.
fn serve(config: &Path, directory: &Path, extra: &[&str]) -> Served {
    let pipeline = Pipeline::shared();
    let keys = directory.join("keys.toml");
    write_keys(&keys);
    let mut command = pipeline.serve_demo(config, &keys, &directory.join("records"));
    command.args(extra);
    Served::start(&mut command)
}

/// A chat request named `id`, by curl: its status.
fn ask(served: &Served, id: &str, content: &str) -> u16 {
    ask_with(served, id, content, &[])
}

fn scrape(served: &Served) -> String {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .arg(served.url("/metrics"))
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

/// `/metrics` as the Prometheus client library parses it: its families,
/// each with `name`, `type` and `samples` (`name`, `labels`, `value`).
fn parsed_by_prometheus(python: &std::ffi::OsStr, text: &str, directory: &Path) -> Vec<Value> {
    let path = directory.join("metrics.txt");
    std::fs::write(&path, text).unwrap();
    let script = format!(
        r#"
import json
from prometheus_client.parser import text_string_to_metric_families
text = open({path:?}).read()
families = [
    {{"name": family.name, "type": family.type,
      "samples": [{{"name": s.name, "labels": s.labels, "value": s.value}} for s in family.samples]}}
    for family in text_string_to_metric_families(text)
]
print(json.dumps(families))
"#,
        path = path.display().to_string()
    );
    serde_json::from_str(&run_python(python, &script)).unwrap()
}

/// The sum of the samples named `name` whose labels include `labels`.
fn total(families: &[Value], name: &str, labels: &[(&str, &str)]) -> f64 {
    families
        .iter()
        .flat_map(|family| family["samples"].as_array().unwrap())
        .filter(|sample| sample["name"] == name)
        .filter(|sample| {
            labels
                .iter()
                .all(|(label, value)| sample["labels"][label] == *value)
        })
        .map(|sample| sample["value"].as_f64().unwrap())
        .sum()
}

/// One serve run through a brown-out, as its log, its `/metrics` and its
/// records show it: the primary fails its first two calls (both move to
/// the backup), the third request finds the breaker open, and after
/// `open_ms` a probe closes it. The fixture the tests below read.
struct BrownOut {
    /// The signed config serve ran.
    config: std::path::PathBuf,
    log: String,
    metrics: String,
    records: Vec<Value>,
    _directory: tempfile::TempDir,
}

impl BrownOut {
    fn shared() -> &'static BrownOut {
        static SHARED: std::sync::OnceLock<BrownOut> = std::sync::OnceLock::new();
        SHARED.get_or_init(BrownOut::run)
    }

    fn run() -> BrownOut {
        let pipeline = Pipeline::shared();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let primary = ScriptedUpstream::start(move |_| {
            if counted.fetch_add(1, Ordering::SeqCst) < 2 {
                overloaded()
            } else {
                completed("from the primary")
            }
        });
        let backup = ScriptedUpstream::start(|_| completed("from the backup"));
        let breaker = "\n[routes.breaker]\nfirst_token_deadline_ms = 5000.0\nopen_after = 2\nopen_ms = 300.0\n";
        let config = signed_table(
            pipeline,
            "operations",
            &falling_back(&primary.base_url(), &backup.base_url(), breaker, 20_000),
        );
        let directory = tempfile::tempdir().unwrap();
        let served = serve(
            &config,
            directory.path(),
            &["--log-requests", "--retry-budget", "1"],
        );
        for id in ["ops-1", "ops-2", "ops-3"] {
            assert_eq!(ask(&served, id, PROMPT), 200, "{id}");
        }
        std::thread::sleep(Duration::from_millis(400));
        for id in ["ops-4", "ops-5"] {
            assert_eq!(ask(&served, id, PROMPT), 200, "{id}");
        }
        let metrics = scrape(&served);
        let log = served.stop_with_log();
        let records = served_records(
            &directory.path().join("records"),
            &["id", "route", "reason", "input_tokens", "output_tokens"],
        );
        BrownOut {
            config,
            log,
            metrics,
            records,
            _directory: directory,
        }
    }

    /// `/metrics` as the Prometheus client parses it, or `None` (the test
    /// says it was skipped) without its Python.
    fn parsed_metrics(&self, what: &str) -> Option<Vec<Value>> {
        let python = proxy_python(what)?;
        let directory = tempfile::tempdir().unwrap();
        Some(parsed_by_prometheus(
            &python,
            &self.metrics,
            directory.path(),
        ))
    }
}

#[test]
fn serve_logs_json_lines_from_started_to_stopped_without_a_prompt_or_a_key() {
    let log = &BrownOut::shared().log;
    let lines = log_lines(log);
    assert_eq!(lines.first().unwrap()["event"], "started", "{log}");
    assert_eq!(lines.last().unwrap()["event"], "stopped", "{log}");
    assert_eq!(log_events(log, "stopping").len(), 1, "{log}");
    assert!(
        !log.contains("zebra") && !log.contains(KEY),
        "a prompt or a key in the log: {log}"
    );
}

#[test]
fn serve_logs_each_upstream_failure_and_the_breaker_opening_and_closing() {
    let log = &BrownOut::shared().log;
    let failed = log_events(log, "upstream_failed");
    assert_eq!(failed.len(), 2, "{log}");
    for (line, id) in failed.iter().zip(["ops-1", "ops-2"]) {
        assert_eq!(line["level"], "warn", "{line}");
        assert_eq!(line["request_id"], id, "{line}");
        assert_eq!(line["route"], "large", "{line}");
        assert_eq!(line["failure"], "status", "{line}");
        assert_eq!(line["upstream_status"], 500, "{line}");
        assert_eq!(line["fallback"], "backup", "{line}");
    }
    let opened = log_events(log, "breaker_opened");
    assert_eq!(opened.len(), 1, "{log}");
    assert_eq!(opened[0]["route"], "large");
    assert_eq!(opened[0]["open_ms"], 300.0);
    let closed = log_events(log, "breaker_closed");
    assert_eq!(closed.len(), 1, "{log}");
    assert_eq!(closed[0]["route"], "large");
}

#[test]
fn serve_logs_a_line_per_request_with_its_route_reason_and_cost() {
    let log = &BrownOut::shared().log;
    let requests = log_events(log, "request");
    let ids: Vec<&str> = requests
        .iter()
        .map(|line| line["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ops-1", "ops-2", "ops-3", "ops-4", "ops-5"], "{log}");
    let routes: Vec<&str> = requests
        .iter()
        .map(|line| line["route"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["backup", "backup", "backup", "large", "large"]);
    assert_eq!(requests[0]["reason"], "fallback:error");
    assert_eq!(requests[2]["reason"], "fallback:breaker");
    for line in &requests {
        assert_eq!(line["status"], "ok", "{line}");
        assert_eq!(line["tenant"], "demo", "{line}");
        assert!(line["total_ms"].as_f64().unwrap() > 0.0, "{line}");
        assert!(line["cost_usd"].as_f64().unwrap() > 0.0, "{line}");
        assert!(line.get("prompt").is_none() && line.get("messages").is_none());
    }
}

#[test]
fn serve_metrics_parse_with_the_prometheus_client_and_follow_its_naming() {
    let Some(families) =
        BrownOut::shared().parsed_metrics("serve's /metrics named as Prometheus asks")
    else {
        return;
    };
    // serve's own families, and the process collector's standard names.
    let process = [
        "process_start_time_seconds",
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
    ];
    for name in process {
        assert!(
            families.iter().any(|family| family["name"] == name),
            "no {name}"
        );
    }
    for family in &families {
        let name = family["name"].as_str().unwrap();
        assert!(
            name.starts_with("routeval_") || process.contains(&name),
            "{name}"
        );
        if family["type"] == "counter" {
            for sample in family["samples"].as_array().unwrap() {
                let sample_name = sample["name"].as_str().unwrap();
                assert!(
                    sample_name.ends_with("_total"),
                    "counter {sample_name} without _total"
                );
            }
        }
        if family["type"] == "histogram" {
            assert!(
                name.ends_with("_seconds"),
                "histogram {name} without a unit"
            );
        }
    }
}

#[test]
fn serve_metrics_count_the_requests_calls_breaker_and_tokens_the_records_show() {
    let brown_out = BrownOut::shared();
    let Some(families) = brown_out.parsed_metrics("serve's /metrics parsed by prometheus_client")
    else {
        return;
    };
    // Five requests, and the two attempts abandoned for the backup.
    assert_eq!(total(&families, "routeval_requests_total", &[]), 7.0);
    // The build, and the process's own resources, each plausible.
    assert_eq!(
        total(
            &families,
            "routeval_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(total(&families, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(total(&families, "process_open_fds", &[]) >= 3.0);
    assert!(total(&families, "process_max_fds", &[]) >= total(&families, "process_open_fds", &[]));
    assert!(total(&families, "process_cpu_seconds_total", &[]) > 0.0);
    assert!(total(&families, "process_start_time_seconds", &[]) > 1.7e9);
    assert_eq!(
        total(
            &families,
            "routeval_requests_total",
            &[("reason", "abandoned:error")]
        ),
        2.0
    );
    assert_eq!(
        total(
            &families,
            "routeval_slice_requests_total",
            &[("tenant", "demo"), ("status", "ok")]
        ),
        5.0
    );
    assert_eq!(
        total(&families, "routeval_request_duration_seconds_count", &[]),
        5.0
    );
    assert_eq!(
        total(
            &families,
            "routeval_request_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        5.0
    );
    for (route, class, calls) in [
        ("large", "5xx", 2.0),
        ("large", "2xx", 2.0),
        ("backup", "2xx", 3.0),
    ] {
        assert_eq!(
            total(
                &families,
                "routeval_upstream_responses_total",
                &[("route", route), ("class", class)]
            ),
            calls,
            "{route} {class}"
        );
    }
    assert_eq!(
        total(
            &families,
            "routeval_retry_budget_calls_total",
            &[("kind", "fallback"), ("outcome", "taken")]
        ),
        2.0
    );
    assert_eq!(
        total(
            &families,
            "routeval_breaker_opens_total",
            &[("route", "large")]
        ),
        1.0
    );
    // Tokens as the records count them, attempts aside.
    let answered: Vec<&Value> = brown_out
        .records
        .iter()
        .filter(|record| record["id"].as_str().unwrap().starts_with("ops-"))
        .filter(|record| !record["reason"].as_str().unwrap().starts_with("abandoned"))
        .collect();
    assert_eq!(answered.len(), 5);
    for (column, metric) in [
        ("input_tokens", "routeval_input_tokens_total"),
        ("output_tokens", "routeval_output_tokens_total"),
    ] {
        let recorded: f64 = answered
            .iter()
            .map(|record| record[column].as_f64().unwrap())
            .sum();
        assert!(recorded > 0.0);
        assert_eq!(total(&families, metric, &[]), recorded, "{metric}");
    }
    let signed: Value = serde_json::from_slice(&std::fs::read(&brown_out.config).unwrap()).unwrap();
    let expires_at = signed["expires_at"].as_str().unwrap();
    let expiry = total(&families, "routeval_config_expiry_timestamp_seconds", &[]);
    assert!(expiry > 1.7e9, "{expiry}");
    assert!(
        expires_at.starts_with(&expiry_date(expiry)),
        "{expires_at} vs {expiry}"
    );
}

/// `YYYY-MM-DD` of Unix seconds, by `date`.
fn expiry_date(seconds: f64) -> String {
    let output = Command::new("date")
        .args(["-u", "-d", &format!("@{}", seconds as i64), "+%Y-%m-%d"])
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn quiet_keeps_warnings_and_a_terminal_gets_lines_for_a_person() {
    let (_upstream, config) = answering("hi", "operations-quiet");
    let directory = tempfile::tempdir().unwrap();
    let served = serve(&config, directory.path(), &["--quiet", "--log-requests"]);
    assert_eq!(ask(&served, "quiet-1", PROMPT), 200);
    let log = served.stop_with_log();
    assert!(
        log_lines(&log).iter().all(|line| line["level"] != "info"),
        "--quiet logged info: {log}"
    );
    let directory = tempfile::tempdir().unwrap();
    let served = serve(
        &config,
        directory.path(),
        &["--log-format", "human", "--log-requests"],
    );
    assert_eq!(ask(&served, "human-1", PROMPT), 200);
    let log = served.stop_with_log();
    let request = log
        .lines()
        .find(|line| line.contains(" request: "))
        .unwrap_or_else(|| panic!("no request line: {log}"));
    assert!(
        request.contains("  INFO request: ok by ") && request.contains("request_id=\"human-1\""),
        "{request}"
    );
}

#[test]
fn log_level_error_keeps_the_errors_only_and_overrides_quiet() {
    // A route that fails: its upstream_failed line is a warning, which
    // --quiet alone would keep.
    let failing = ScriptedUpstream::start(|_| {
        vec![Step::Send(response(
            "500 Internal Server Error",
            &[],
            "application/json",
            br#"{"error": {"message": "down", "type": "server_error"}}"#,
        ))]
    });
    let config = signed_single(
        Pipeline::shared(),
        &failing.base_url(),
        "operations-level",
        None,
    );
    let directory = tempfile::tempdir().unwrap();
    let served = serve(
        &config,
        directory.path(),
        &["--quiet", "--log-level", "error", "--log-requests"],
    );
    assert_eq!(ask(&served, "level-1", PROMPT), 500);
    // A keys file that does not load: an error, kept.
    std::fs::write(directory.path().join("keys.toml"), "[[keys]]\nsha256 = 1\n").unwrap();
    served.signal("HUP");
    std::thread::sleep(Duration::from_millis(1_500));
    let log = served.stop_with_log();
    let lines = log_lines(&log);
    assert!(
        lines.iter().all(|line| line["level"] == "error"),
        "--log-level error logged less: {log}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line["event"] == "keys_reload_refused"),
        "{log}"
    );
}

/// The prompts of the records in `records`, as routeval's readers (drift,
/// sample, replay) see them.
fn prompts_read(records: &Path) -> Vec<Option<String>> {
    let mut prompts = Vec::new();
    routeval::records::for_each_record(
        records,
        &routeval::records::FieldNames::default(),
        |_, record| {
            prompts.push(record.prompt_text().map(std::borrow::Cow::into_owned));
            Ok(())
        },
    )
    .unwrap();
    prompts
}

#[test]
fn records_keep_prompts_whole_redacted_or_not_at_all() {
    let (_upstream, config) = answering("hi", "operations-prompts");
    let secret = "sk-proj-abcdefghijklmnop1234";
    let prompt = format!("my api key is {secret}, why is it refused?");
    let mut kept = Vec::new();
    let mut directories = Vec::new();
    for what in ["full", "redacted", "none"] {
        let directory = tempfile::tempdir().unwrap();
        let served = serve(&config, directory.path(), &["--records-prompts", what]);
        assert_eq!(ask(&served, what, &prompt), 200);
        served.stop();
        let records = directory.path().join("records");
        let mut record = served_records(&records, &["id", "prompt", "messages"]);
        assert_eq!(record.len(), 1, "{what}: {record:?}");
        // The prompt is stored once, in the messages; readers take it there.
        assert_eq!(record[0]["prompt"], Value::Null, "{what}: {record:?}");
        record[0]["prompt"] = prompts_read(&records)[0].clone().into();
        kept.push(record[0].clone());
        directories.push(directory);
    }
    let [full, redacted, none] = &kept[..] else {
        unreachable!()
    };
    assert_eq!(full["prompt"], prompt.as_str());
    assert!(full["messages"].as_str().unwrap().contains(secret));
    let redacted_prompt = redacted["prompt"].as_str().unwrap();
    assert!(
        !redacted_prompt.contains(secret) && redacted_prompt.contains("[redacted]"),
        "{redacted_prompt}"
    );
    assert!(redacted_prompt.contains("why is it refused?"));
    // The messages stay JSON, each text redacted.
    let messages: Value = serde_json::from_str(redacted["messages"].as_str().unwrap()).unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"], redacted_prompt);
    assert_eq!(none["prompt"], Value::Null);
    assert_eq!(none["messages"], Value::Null);
    // Records that kept no prompt are nothing to sample: an error that says
    // why, and no labelling set.
    let records = directories[2].path().join("records");
    let out = directories[2].path().join("to-label.jsonl");
    let output = crate::common::routeval()
        .args(["sample", "--per-slice", "5", "--records"])
        .arg(&records)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no record keeps its prompt") && stderr.contains("--records-prompts"),
        "{stderr}"
    );
    assert!(!out.exists());
}

/// Points `live` at `release` in one rename, as a replayed old release
/// would be.
fn switch(live: &Path, release: &str) {
    let next = live.with_extension("next");
    std::os::unix::fs::symlink(release, &next).unwrap();
    std::fs::rename(&next, live).unwrap();
}

/// `release` (a signed config and its signature) as its own release
/// directory `name` beside `live`, switched in by hand.
fn switch_to_copy(live: &Path, release: &Path, name: &str) {
    let directory = live.parent().unwrap().join("releases").join(name);
    std::fs::create_dir_all(&directory).unwrap();
    std::fs::copy(release, directory.join("route-config.json")).unwrap();
    std::fs::copy(
        routeval::routes::signature_path(release),
        directory.join("route-config.json.minisig"),
    )
    .unwrap();
    switch(live, &format!("releases/{name}"));
}

fn readyz(served: &Served) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--max-time", "5"])
        .arg(served.url("/readyz"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_owned())
}

#[test]
fn a_replica_that_missed_a_version_takes_the_next_as_a_restart_would_and_a_refused_reload_is_loud()
{
    let pipeline = Pipeline::shared();
    let (upstream, v1) = answering("from the upstream", "skip-v1");
    let v2 = signed_single(pipeline, &upstream.base_url(), "skip-v2", Some(&v1));
    let out = pipeline.path("skip-v3");
    gate_single(pipeline, &pipeline.path("skip-v2.toml"), &out, None, true)
        .arg("--baseline")
        .arg(&v2)
        .assert()
        .success();
    let v3 = out.join("route-config.v3.json");
    let directory = tempfile::tempdir().unwrap();
    let live = directory.path().join("live");
    let (deployed, stderr) = deploy(
        &v1,
        &live,
        &pipeline.out.join("keys/demo.key.pub"),
        Some(&pipeline.out.join("router.bin")),
    );
    assert!(deployed, "{stderr}");
    let served = serve(&live.join("route-config.json"), directory.path(), &[]);
    assert!(ready_at(&served, 1));
    // v2 never reached this replica; v3, whose parent is v2, is taken as a
    // restart would take it.
    switch_to_copy(&live, &v3, "v3-direct");
    assert!(ready_at(&served, 3), "the replica is stranded on version 1");
    // A file that does not verify is refused: the replica serves on, ready,
    // and says what it refused, in /readyz and in /metrics.
    let mut tampered: Value = serde_json::from_slice(&std::fs::read(&v3).unwrap()).unwrap();
    tampered["version"] = 4.into();
    let forged = directory.path().join("forged.json");
    std::fs::write(&forged, tampered.to_string()).unwrap();
    std::fs::copy(
        routeval::routes::signature_path(&v3),
        routeval::routes::signature_path(&forged),
    )
    .unwrap();
    switch_to_copy(&live, &forged, "v4-forged");
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let (code, body) = loop {
        let (code, body) = readyz(&served);
        if body.contains("refused a reload") || std::time::Instant::now() > until {
            break (code, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ready: ") && body.contains("version 3; refused a reload: "),
        "{body}"
    );
    let metrics = Command::new("curl")
        .args(["-s", "--max-time", "5"])
        .arg(served.url("/metrics"))
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("\nrouteval_config_reload_refused 1\n"),
        "{metrics}"
    );
    assert_eq!(ask(&served, "after-refusal", PROMPT), 200);
    let log = served.stop_with_log();
    let skipped = log_events(&log, "config_versions_skipped");
    assert_eq!(skipped.len(), 1, "{log}");
    assert_eq!(skipped[0]["config_version"], 3, "{log}");
    assert_eq!(skipped[0]["previous_version"], 1, "{log}");
}

/// `routeval verify CONFIG --previous PREVIOUS` with the demo's public key.
fn verify_after(config: &Path, previous: &Path) -> assert_cmd::assert::Assert {
    crate::common::routeval()
        .arg("verify")
        .arg(config)
        .arg("--pubkey")
        .arg(Pipeline::shared().out.join("keys/demo.key.pub"))
        .arg("--previous")
        .arg(previous)
        .assert()
}

/// `config` (version 2) deployed by `ci/deploy-config.sh` with the demo's
/// router into a directory of its own, and serve on it, ready: the
/// directory, the live link, the public key and the serve.
fn serving_deployed(config: &Path) -> (tempfile::TempDir, PathBuf, PathBuf, Served) {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let live = directory.path().join("live");
    let pubkey = pipeline.out.join("keys/demo.key.pub");
    let (deployed, stderr) = deploy(
        config,
        &live,
        &pubkey,
        Some(&pipeline.out.join("router.bin")),
    );
    assert!(deployed, "{stderr}");
    let served = serve(&live.join("route-config.json"), directory.path(), &[]);
    assert!(ready_at(&served, 2));
    (directory, live, pubkey, served)
}

#[test]
fn each_version_comes_with_its_way_back_signed_so_going_back_needs_no_key() {
    let pipeline = Pipeline::shared();
    let (first_upstream, v1) = answering("from v1's upstream", "presigned-v1");
    let (second_upstream, _) = answering("from v2's upstream", "presigned-v2-alone");
    // The gate that signs v2 over the deployed v1 signs, beside it, v1's
    // table as version 3, its parent v2.
    let v2 = signed_single(
        pipeline,
        &second_upstream.base_url(),
        "presigned-v2",
        Some(&v1),
    );
    let back = pipeline.path("presigned-v2/rollback/route-config.v3.json");
    let read = |path: &Path| -> Value {
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let (old, rollback) = (read(&v1), read(&back));
    assert_eq!(rollback["version"], 3);
    assert_eq!(rollback["table"], old["table"]);
    assert_eq!(rollback["provenance"]["rollback_of"]["version"], 1);
    let report = read(&pipeline.path("presigned-v2/rollback/gate-report.json"));
    assert_eq!(report["rollback"]["to"]["version"], 1);
    verify_after(&back, &v2).success();

    // In the incident: v2 is live, and the on-call engineer, with the
    // public key only, deploys the way back as the next version.
    let (_directory, live, pubkey, served) = serving_deployed(&v2);
    assert_eq!(ask(&served, "before-the-way-back", PROMPT), 200);
    let (deployed, stderr) = deploy(&back, &live, &pubkey, None);
    assert!(deployed, "{stderr}");
    assert!(ready_at(&served, 3), "the way back was not served");
    let before = first_upstream.requests().len();
    assert_eq!(ask(&served, "after-the-way-back", PROMPT), 200);
    assert_eq!(
        first_upstream.requests().len(),
        before + 1,
        "not v1's route"
    );
    let log = served.stop_with_log();
    assert!(
        log_events(&log, "config_reload_refused").is_empty(),
        "{log}"
    );

    // Once a newer version went out instead, the way back of v2 is stale:
    // it no longer follows what is live.
    let out = pipeline.path("presigned-v3-forward");
    gate_single(
        pipeline,
        &pipeline.path("presigned-v2.toml"),
        &out,
        None,
        true,
    )
    .arg("--baseline")
    .arg(&v2)
    .assert()
    .success()
    .stderr(predicates::str::contains(format!(
        "the way back is signed: deploy {} as the next version",
        out.join("rollback/route-config.v4.json").display()
    )));
    verify_after(&back, &out.join("route-config.v3.json"))
        .code(1)
        .stderr(predicates::str::contains(
            "version 3 does not increase over the previous config's 3",
        ));
}

#[test]
fn a_rollback_is_signed_as_the_next_version_and_served_as_a_forward_step() {
    let pipeline = Pipeline::shared();
    // v2 moved every route to another upstream; the rollback moves them
    // back.
    let (first_upstream, v1) = answering("from v1's upstream", "rollback-v1");
    let (second_upstream, _) = answering("from v2's upstream", "rollback-v2-alone");
    let v2 = signed_single(
        pipeline,
        &second_upstream.base_url(),
        "rollback-v2",
        Some(&v1),
    );
    let key = pipeline.out.join("keys/demo.key");
    let out = pipeline.path("rollback-out");
    let gate = |extra: &[&std::ffi::OsStr]| {
        let mut command = crate::common::routeval();
        command.arg("gate").args(extra);
        command.arg("--key").arg(&key).arg("--out").arg(&out);
        command
    };
    // Forward is not a rollback, and a rollback evaluates nothing.
    let forward = gate(&[
        "--rollback-to".as_ref(),
        v2.as_os_str(),
        "--baseline".as_ref(),
        v1.as_os_str(),
    ])
    .assert()
    .code(2);
    let stderr = String::from_utf8_lossy(&forward.get_output().stderr).into_owned();
    assert!(
        stderr.contains("is not older than the deployed version 1"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    gate(&[
        "--rollback-to".as_ref(),
        v1.as_os_str(),
        "--baseline".as_ref(),
        v2.as_os_str(),
        "--target".as_ref(),
        "0.9".as_ref(),
    ])
    .assert()
    .code(2);
    assert!(!out.exists(), "a refused rollback wrote {}", out.display());

    let rolled = gate(&[
        "--rollback-to".as_ref(),
        v1.as_os_str(),
        "--baseline".as_ref(),
        v2.as_os_str(),
        "--json".as_ref(),
    ])
    .assert()
    .success();
    let report: routeval::schema::GateReport =
        serde_json::from_slice(&rolled.get_output().stdout).unwrap();
    let rollback = report.rollback.as_ref().expect("the report says rollback");
    assert_eq!(rollback.to.version, 1);
    let v3 = out.join("route-config.v3.json");
    let read =
        |path: &Path| -> Value { serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap() };
    let (first, second, third) = (read(&v1), read(&v2), read(&v3));
    let sha256 = |path: &Path| routeval::digest::sha256_hex(&std::fs::read(path).unwrap());
    assert_eq!(rollback.to.sha256, sha256(&v1));
    assert_eq!(third["version"], 3);
    assert_eq!(third["parent_sha256"], sha256(&v2).as_str());
    assert_eq!(third["table"], first["table"]);
    assert_eq!(third["serving"], first["serving"]);
    assert_ne!(third["table"], second["table"]);
    assert_eq!(third["provenance"]["rollback_of"]["version"], 1);
    assert_eq!(
        third["provenance"]["metrics"], first["provenance"]["metrics"],
        "the measurements are v1's"
    );
    let markdown = std::fs::read_to_string(out.join("gate-report.md")).unwrap();
    assert!(markdown.contains("**This is a rollback.**"), "{markdown}");
    verify_after(&v3, &v2).success();

    // serve on v2, deployed by ci/deploy-config.sh; v1 itself, switched in
    // by hand as a replayed old release would be, is refused; v3 is
    // deployed as the next version.
    let (directory, live, pubkey, served) = serving_deployed(&v2);
    let replayed = directory.path().join("releases/replayed-v1");
    std::fs::create_dir_all(&replayed).unwrap();
    std::fs::copy(&v1, replayed.join("route-config.json")).unwrap();
    std::fs::copy(
        routeval::routes::signature_path(&v1),
        replayed.join("route-config.json.minisig"),
    )
    .unwrap();
    switch(&live, "releases/replayed-v1");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(ready_at(&served, 2));
    // The recipe deploys only what follows the live file: put v2 back.
    let (deployed, stderr) = deploy(&v3, &live, &pubkey, None);
    assert!(
        !deployed && stderr.contains("is not the previous config's sha256"),
        "{stderr}"
    );
    switch(&live, "releases/route-config.v2");
    let (deployed, stderr) = deploy(&v3, &live, &pubkey, None);
    assert!(deployed, "{stderr}");
    assert!(ready_at(&served, 3), "the rollback was not served");
    let before = (
        first_upstream.requests().len(),
        second_upstream.requests().len(),
    );
    assert_eq!(ask(&served, "after-rollback", PROMPT), 200);
    assert_eq!(
        (
            first_upstream.requests().len(),
            second_upstream.requests().len()
        ),
        (before.0 + 1, before.1),
        "the rolled-back table's upstream answers"
    );
    let log = served.stop_with_log();
    let refused = log_events(&log, "config_reload_refused");
    assert_eq!(refused.len(), 1, "{log}");
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("a rollback is refused"),
        "{log}"
    );
    let applied = log_events(&log, "config_reloaded");
    assert_eq!(applied.len(), 1, "{log}");
    assert_eq!(applied[0]["config_version"], 3);
    assert_eq!(applied[0]["previous_version"], 2);
}

/// A chat request named `id` carrying the client's `traceparent`.
fn ask_traced(served: &Served, id: &str, traceparent: &str) -> u16 {
    ask_with(served, id, PROMPT, &[format!("traceparent: {traceparent}")])
}

#[test]
fn serve_exports_a_trace_per_request_that_a_real_otlp_decoder_reads() {
    let Some(python) = proxy_python("serve's OTLP traces decoded by opentelemetry-proto") else {
        return;
    };
    let pipeline = Pipeline::shared();
    let primary = ScriptedUpstream::start(|_| overloaded());
    let backup = ScriptedUpstream::start(|_| completed("from the backup"));
    let config = signed_table(
        pipeline,
        "operations-traces",
        &falling_back(&primary.base_url(), &backup.base_url(), "", 20_000),
    );
    let directory = tempfile::tempdir().unwrap();
    let collector = crate::common::otlp::Collector::start(&python, directory.path());
    let endpoint = format!("http://127.0.0.1:{}/v1/traces", collector.port);
    let served = serve(
        &config,
        directory.path(),
        &["--otlp-endpoint", &endpoint, "--retry-budget", "1"],
    );
    let client_trace = "0af7651916cd43dd8448eb211c80319c";
    let client_span = "b7ad6b7169203331";
    let traceparent = format!("00-{client_trace}-{client_span}-01");
    assert_eq!(ask_traced(&served, "traced-1", &traceparent), 200);
    served.stop();
    let spans: Vec<Value> = collector
        .spans()
        .into_iter()
        .filter(|span| span["trace_id"] == client_trace)
        .collect();
    assert_eq!(
        spans.len(),
        4,
        "the request, its decision, two attempts: {spans:#?}"
    );
    for span in &spans {
        assert_eq!(span["path"], "/v1/traces");
        assert_eq!(span["content_type"], "application/x-protobuf");
        assert_eq!(span["service"], "routeval-serve");
        assert!(span["end"].as_u64() >= span["start"].as_u64(), "{span}");
    }
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|span| span["name"] == name).collect() };
    let root = named("POST /v1/chat/completions");
    assert_eq!(root.len(), 1, "{spans:#?}");
    let root = root[0];
    assert_eq!(
        root["parent_span_id"], client_span,
        "a child of the client's span"
    );
    assert_eq!(root["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(root["attributes"]["routeval.request_id"], "traced-1");
    assert_eq!(root["attributes"]["routeval.route"], "backup");
    assert_eq!(root["attributes"]["routeval.reason"], "fallback:error");
    assert_eq!(root["attributes"]["routeval.tenant"], "demo");
    let decide = named("decide");
    assert_eq!(decide.len(), 1);
    assert_eq!(decide[0]["parent_span_id"], root["span_id"]);
    assert_eq!(decide[0]["attributes"]["routeval.routes"], "large");
    let attempts = named("upstream");
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    let attempt = |route: &str| {
        *attempts
            .iter()
            .find(|span| span["attributes"]["routeval.route"] == route)
            .unwrap_or_else(|| panic!("no attempt on {route}: {attempts:#?}"))
    };
    let (failed, moved) = (attempt("large"), attempt("backup"));
    for span in [failed, moved] {
        assert_eq!(span["parent_span_id"], root["span_id"]);
        assert_eq!(span["kind"], 3, "SPAN_KIND_CLIENT");
    }
    assert_eq!(failed["attributes"]["routeval.attempt"], "route");
    assert_eq!(failed["attributes"]["http.response.status_code"], 500);
    assert_eq!(failed["attributes"]["routeval.upstream_class"], "5xx");
    assert_eq!(failed["status"], 2, "STATUS_CODE_ERROR");
    assert_eq!(moved["attributes"]["routeval.attempt"], "fallback");
    assert_eq!(moved["attributes"]["routeval.upstream_class"], "2xx");
    assert_ne!(moved["status"], 2);
    // Each call upstream carried its own attempt's span as its parent.
    for (upstream, span) in [(&primary, failed), (&backup, moved)] {
        let received = upstream.requests();
        assert_eq!(received.len(), 1);
        assert_eq!(
            received[0].header("traceparent"),
            Some(format!(
                "00-{client_trace}-{}-01",
                span["span_id"].as_str().unwrap()
            ))
        );
        assert_eq!(
            received[0].header("x-request-id").as_deref(),
            Some("traced-1")
        );
    }

    // A cascade's verifier call is a span of its own, between its stages.
    let sim = crate::common::start_sim(
        &crate::common::repo().join("datasets/demo/prompts.jsonl"),
        routeval::upstream_sim::SimSettings::default(),
    );
    let report = pipeline.gate(
        "cascade.toml",
        &crate::common::base_url(&sim),
        &pipeline.out.join("graded-scored.parquet"),
        "operations-traced-cascade",
    );
    assert!(report["emitted"].is_object(), "{report}");
    let cascade = pipeline.path("operations-traced-cascade/route-config.v1.json");
    let directory = tempfile::tempdir().unwrap();
    let served = serve(
        &cascade,
        directory.path(),
        &["--otlp-endpoint", &endpoint, "--trust-slice-header"],
    );
    let (_, slice, prompt) = crate::common::demo_prompts().swap_remove(0);
    let cascade_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let body =
        json!({"model": "support-assistant", "messages": [{"role": "user", "content": prompt}]});
    let answer = served.post(
        KEY,
        &slice,
        &body,
        &[
            "-H",
            &format!("traceparent: 00-{cascade_trace}-00f067aa0ba902b7-01"),
        ],
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    served.stop();
    let spans: Vec<Value> = collector
        .spans()
        .into_iter()
        .filter(|span| span["trace_id"] == cascade_trace)
        .collect();
    let root = spans
        .iter()
        .find(|span| span["name"] == "POST /v1/chat/completions")
        .unwrap_or_else(|| panic!("no request span: {spans:#?}"));
    let verify: Vec<&Value> = spans
        .iter()
        .filter(|span| span["name"] == "verify")
        .collect();
    assert_eq!(verify.len(), 1, "{spans:#?}");
    assert_eq!(verify[0]["parent_span_id"], root["span_id"]);
    assert_eq!(verify[0]["kind"], 3);
    assert_eq!(verify[0]["attributes"]["http.response.status_code"], 200);
    let first_stage = spans
        .iter()
        .find(|span| span["name"] == "upstream" && span["attributes"]["routeval.stage"] == 0)
        .unwrap_or_else(|| panic!("no first stage: {spans:#?}"));
    assert!(
        verify[0]["start"].as_u64() >= first_stage["end"].as_u64(),
        "the verifier is asked after the first stage's answer"
    );

    // Without --otlp-endpoint nothing is traced, and the client's context
    // goes upstream as it came.
    let directory = tempfile::tempdir().unwrap();
    let served = serve(&config, directory.path(), &["--retry-budget", "1"]);
    assert_eq!(ask_traced(&served, "untraced-1", &traceparent), 200);
    served.stop();
    let last = backup.requests().pop().unwrap();
    assert_eq!(last.header("traceparent"), Some(traceparent));
}

#[test]
fn each_failure_is_logged_with_what_became_of_its_request() {
    // The primary fails as the prompt asks: an error, no first token in
    // time, or a stream cut after its first token.
    let primary = ScriptedUpstream::start(|received| {
        let body = String::from_utf8_lossy(&received.body).into_owned();
        if body.contains("answer with an error") {
            overloaded()
        } else if body.contains("answer too late") {
            vec![
                Step::Pause(Duration::from_millis(1500)),
                Step::Send(response(
                    "200 OK",
                    &[],
                    "application/json",
                    &completion("late"),
                )),
            ]
        } else {
            vec![
                Step::Send(crate::common::sse_head()),
                Step::Send(crate::common::sse_chunk("the first words", None)),
            ]
        }
    });
    let backup = ScriptedUpstream::start(|_| completed("from the backup"));
    let config = signed_table(
        Pipeline::shared(),
        "operations-failures",
        &falling_back(&primary.base_url(), &backup.base_url(), "", 20_000),
    );
    let directory = tempfile::tempdir().unwrap();
    // No extra call allowed: a failed route may not move to its fallback.
    let served = serve(
        &config,
        directory.path(),
        &[
            "--retry-budget",
            "0",
            "--retry-budget-min",
            "0",
            "--first-token-timeout-ms",
            "400",
        ],
    );
    assert_eq!(ask(&served, "failing-error", "answer with an error"), 500);
    assert_eq!(ask(&served, "failing-late", "answer too late"), 504);
    assert_eq!(ask(&served, "failing-cut", "answer and stop"), 502);
    // A client that streams gets the words that came, then an error event,
    // never a `[DONE]` that says the answer is whole.
    let body = json!({"model": "support-assistant", "stream": true,
                      "messages": [{"role": "user", "content": "answer and stop"}]});
    let streamed = Command::new("curl")
        .args(["-s", "-N", "--max-time", "20"])
        .args(["-H", &format!("Authorization: Bearer {KEY}")])
        .args(["-H", "x-request-id: failing-cut-streamed"])
        .args(["-d", &body.to_string()])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    let streamed = String::from_utf8_lossy(&streamed.stdout).into_owned();
    assert!(streamed.contains("the first words"), "{streamed}");
    assert!(
        streamed.contains("closed its stream before [DONE]") && !streamed.contains("[DONE]\n"),
        "{streamed}"
    );
    let log = served.stop_with_log();
    let records = served_records(
        &directory.path().join("records"),
        &["id", "status", "finish_reason"],
    );
    let cut_streamed = records
        .iter()
        .find(|record| record["id"] == "failing-cut-streamed")
        .unwrap();
    assert_eq!(cut_streamed["status"], "error");
    assert_eq!(cut_streamed["finish_reason"], "upstream_cut");
    let failed = log_events(&log, "upstream_failed");
    let by_id = |lines: &[Value], id: &str| -> Value {
        lines
            .iter()
            .find(|line| line["request_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no line for {id}: {log}"))
    };
    let error = by_id(&failed, "failing-error");
    assert_eq!(error["failure"], "status");
    assert_eq!(error["upstream_status"], 500);
    assert_eq!(error["stay"], "no-fallback:budget");
    assert!(error.get("fallback").is_none(), "{error}");
    let late = by_id(&failed, "failing-late");
    assert_eq!(late["failure"], "deadline");
    assert_eq!(late["stay"], "no-fallback:budget");
    let refused = log_events(&log, "budget_refused");
    assert_eq!(refused.len(), 2, "{log}");
    for line in &refused {
        assert_eq!(line["route"], "large");
        assert_eq!(line["allowed"], 0);
        assert_eq!(line["level"], "warn");
    }
    let broken = by_id(&log_events(&log, "answer_broken"), "failing-cut");
    assert_eq!(broken["route"], "large");
    assert_eq!(broken["finish_reason"], "upstream_cut");
    assert!(broken["ttft_ms"].as_f64().is_some(), "{broken}");
}
