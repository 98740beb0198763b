//! `routeval serve` leaving a failing route, through the binary, in front
//! of two serve-sim instances: a brown-out on the primary (slow first
//! tokens, some streams stalling after their first token) opens its breaker
//! and moves requests to the fallback before their first token, and what
//! serve's own records show is what `replay fallback` computes from those
//! records with the same breaker; a dead primary's requests move only as far
//! as the fallback's `rpm` and the retry budget allow.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::{
    EU_KEY, KEY, Pipeline, Served, base_url, demo_prompts, falling_back, header_of, repo, routeval,
    served_records, signed_table, start_serve, start_sim, write_keys,
};
use routeval::upstream_sim::{FaultProfile, SimSettings};

/// Every record serve wrote into `records`, as JSON objects of the columns
/// the tests read.
fn records_of(records: &Path) -> Vec<Value> {
    let rows = served_records(
        records,
        &[
            "id",
            "route",
            "reason",
            "status",
            "ttft_ms",
            "total_ms",
            "finish_reason",
            "input_tokens",
            "output_tokens",
            "cost_usd",
        ],
    );
    assert!(!rows.is_empty(), "no records in {}", records.display());
    rows
}

/// An attempt's record that says its route read its prompt and was given
/// up before any output: the prompt's tokens and their price, no output.
fn assert_billed_its_prompt(attempt: &Value) {
    assert!(attempt["input_tokens"].as_f64().unwrap() > 0.0, "{attempt}");
    assert_eq!(attempt["output_tokens"].as_f64(), Some(0.0), "{attempt}");
    assert!(attempt["cost_usd"].as_f64().unwrap() > 0.0, "{attempt}");
}

/// The value of the series `series` (name and labels as exposed) in the
/// `/metrics` text `metrics`.
fn metric_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in {metrics}"))
}

/// `count` requests (streamed with `stream`), one after another, cycling
/// through the demo's prompts: each response's head and body.
fn one_by_one(
    served: &Served,
    prompts: &[(String, String, String)],
    count: usize,
    stream: bool,
) -> Vec<String> {
    prompts
        .iter()
        .cycle()
        .take(count)
        .map(|(_, slice, prompt)| {
            let body = json!({
                "model": "support-assistant",
                "stream": stream,
                "messages": [{"role": "user", "content": prompt}],
            });
            served.post(KEY, slice, &body, &["-N"])
        })
        .collect()
}

fn is_attempt(record: &Value) -> bool {
    record["id"]
        .as_str()
        .unwrap()
        .ends_with(routeval::records::ATTEMPT_ID_SUFFIX)
}

fn count_reason(records: &[&Value], reason: &str) -> usize {
    records
        .iter()
        .filter(|record| record["reason"] == reason)
        .count()
}

fn status_line(response: &str) -> &str {
    response.lines().next().unwrap_or_default()
}

/// What each test below starts from: the shared demo pipeline, the keys,
/// the demo's prompts and a healthy fallback (serve-sim's small model).
struct Fallback {
    pipeline: &'static Pipeline,
    dataset: std::path::PathBuf,
    keys: std::path::PathBuf,
    prompts: Vec<(String, String, String)>,
    backup: routeval::upstream_sim::RunningSim,
}

impl Fallback {
    fn new() -> Fallback {
        let pipeline = Pipeline::shared();
        let dataset = repo().join("datasets/demo/prompts.jsonl");
        let keys = pipeline.path("resilience-keys.toml");
        write_keys(&keys);
        let backup = start_sim(
            &dataset,
            SimSettings {
                ttft_ms: 30,
                tokens_per_second: 400.0,
                ..SimSettings::default()
            },
        );
        Fallback {
            pipeline,
            dataset,
            keys,
            prompts: demo_prompts(),
            backup,
        }
    }

    /// A path of these tests' own in the shared pipeline.
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.pipeline.path(&format!("resilience-{name}"))
    }

    fn pubkey(&self) -> std::path::PathBuf {
        self.pipeline.out.join("keys/demo.key.pub")
    }

    fn router(&self) -> std::path::PathBuf {
        self.pipeline.out.join("router.bin")
    }

    /// serve of `config` into `records`, its retry budget allowing every
    /// extra call (a hedge's copy is one).
    fn serve_unbudgeted(&self, config: &Path, records: &Path) -> Served {
        start_serve(
            config,
            &self.pubkey(),
            &self.router(),
            &self.keys,
            records,
            &["--retry-budget", "1"],
        )
    }
}

/// How many of `responses` the fallback answered (each 200 is its).
fn answered_by_backup(responses: &[String]) -> usize {
    responses
        .iter()
        .filter(|response| status_line(response).contains(" 200"))
        .inspect(|response| assert_eq!(header_of(response, "x-routeval-route"), "backup"))
        .count()
}

/// A serve-sim that answers every call 500 before its first token.
fn always_failing(setup: &Fallback) -> routeval::upstream_sim::RunningSim {
    start_sim(
        &setup.dataset,
        SimSettings {
            faults: FaultProfile {
                server_error: 1.0,
                ..FaultProfile::default()
            },
            ..SimSettings::default()
        },
    )
}

/// A dead primary, no breaker: every request fails before its first token
/// and may move to the fallback, which allows 5 requests a minute. The
/// primary's serve-sim, and the config signed as `name`.
fn dead_primary(
    setup: &Fallback,
    name: &str,
) -> (routeval::upstream_sim::RunningSim, std::path::PathBuf) {
    let dead = always_failing(setup);
    let config = signed_table(
        setup.pipeline,
        &format!("resilience-{name}"),
        &falling_back(&base_url(&dead), &base_url(&setup.backup), "", 5),
    );
    (dead, config)
}

#[test]
fn a_brown_out_moves_requests_as_replay_fallback_computes_from_serves_records() {
    let setup = Fallback::new();
    // A brown-out: half the primary's first tokens come 900 ms late, past
    // its breaker's 300 ms deadline, and some streams stall mid-answer.
    let primary = start_sim(
        &setup.dataset,
        SimSettings {
            ttft_ms: 20,
            tokens_per_second: 400.0,
            faults: FaultProfile {
                slow_first_token: 0.5,
                slow_first_token_ms: 900,
                stall: 0.15,
                stall_ms: 2_000,
                ..FaultProfile::default()
            },
            ..SimSettings::default()
        },
    );
    let breaker =
        "\n[routes.breaker]\nfirst_token_deadline_ms = 300.0\nopen_after = 2\nopen_ms = 400.0\n";
    let config = signed_table(
        setup.pipeline,
        "resilience-brown-out",
        &falling_back(
            &base_url(&primary),
            &base_url(&setup.backup),
            breaker,
            20_000,
        ),
    );
    let records = setup.path("brown-out-records");
    let served = start_serve(
        &config,
        &setup.pubkey(),
        &setup.router(),
        &setup.keys,
        &records,
        // Every move allowed, as the replay assumes (the budget is checked
        // on a dead primary, in a test of its own).
        &["--stall-timeout-ms", "500", "--retry-budget", "1"],
    );
    // One request after another: each outcome is known before the next
    // arrives, so the breaker sees one sequence, which the replay replays.
    let requests = 60;
    let mut stalled = 0;
    for response in one_by_one(&served, &setup.prompts, requests, true) {
        assert!(status_line(&response).contains(" 200"), "{response}");
        let route = header_of(&response, "x-routeval-route");
        if !response.contains("data: [DONE]") {
            // A stall after the first token: the client's stream breaks
            // off, and no other model's text is ever spliced on.
            stalled += 1;
            assert_eq!(route, "large", "{response}");
            assert!(!response.contains("sim-small"), "{response}");
        }
    }
    let metrics = std::process::Command::new("curl")
        .args(["-s", &served.url("/metrics")])
        .output()
        .unwrap();
    let metrics = String::from_utf8(metrics.stdout).unwrap();
    served.stop();
    let rows = records_of(&records);
    let own: Vec<&Value> = rows.iter().filter(|row| !is_attempt(row)).collect();
    let attempts: Vec<&Value> = rows.iter().filter(|row| is_attempt(row)).collect();
    assert_eq!(own.len(), requests);
    for attempt in &attempts {
        assert_eq!(attempt["route"], "large");
        assert_eq!(attempt["status"], "timeout");
        assert_eq!(attempt["reason"], "abandoned:deadline");
        assert_eq!(attempt["total_ms"], json!(300.0));
        assert_billed_its_prompt(attempt);
        let moved = attempt["id"]
            .as_str()
            .unwrap()
            .strip_suffix(routeval::records::ATTEMPT_ID_SUFFIX)
            .unwrap();
        let request = own.iter().find(|row| row["id"] == moved).unwrap();
        assert_eq!(request["route"], "backup");
        assert_eq!(request["reason"], "fallback:deadline");
    }
    // What the abandoned calls billed is in the route's cost.
    let abandoned_cost: f64 = attempts
        .iter()
        .map(|attempt| attempt["cost_usd"].as_f64().unwrap())
        .sum();
    assert!(
        metric_value(&metrics, "routeval_cost_usd_total{route=\"large\"}") >= abandoned_cost,
        "{metrics}"
    );
    let stalls = own
        .iter()
        .filter(|row| row["finish_reason"] == "stall")
        .count();
    assert_eq!(stalls, stalled);
    assert!(stalled > 0, "no stream stalled: {rows:?}");

    // What the users waited, from serve's own records.
    let mut waits: Vec<f64> = own
        .iter()
        .map(|row| {
            row["ttft_ms"]
                .as_f64()
                .expect("every request had a first token")
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    let total_wait_s = waits.iter().sum::<f64>().round() / 1000.0;
    let p95_wait_s = routeval::stats::percentile(&waits, 0.95).unwrap() / 1000.0;
    let moved = own.iter().filter(|row| row["route"] == "backup").count();

    let replayed = routeval()
        .args(["replay", "fallback", "--records"])
        .arg(&records)
        .args(["--route", "large", "--fallback", "backup"])
        .args([
            "--deadline-ms",
            "300",
            "--open-after",
            "2",
            "--open-ms",
            "400",
        ])
        .args(["--learning", "at-outcome", "--json"])
        .assert()
        .success();
    let document: Value = serde_json::from_slice(&replayed.get_output().stdout).unwrap();
    let replayed = document["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|policy| policy["name"] == "slow-first-token-breaker")
        .unwrap();
    println!(
        "serve: {requests} requests, total wait {total_wait_s} s, p95 {p95_wait_s:.4} s, {moved} moved; replay: {replayed}"
    );
    assert_eq!(replayed["requests"], json!(requests));
    assert_eq!(replayed["total_wait_s"].as_f64().unwrap(), total_wait_s);
    assert!((replayed["p95_wait_s"].as_f64().unwrap() - p95_wait_s).abs() < 1e-9);
    assert_eq!(replayed["fallback_requests"], json!(moved));
    assert_eq!(
        replayed["fallback_share"].as_f64().unwrap(),
        moved as f64 / requests as f64
    );
    assert_eq!(
        replayed["deadline_fallbacks"],
        json!(count_reason(&own, "fallback:deadline"))
    );
    assert_eq!(
        replayed["breaker_fallbacks"],
        json!(count_reason(&own, "fallback:breaker"))
    );
    assert_eq!(replayed["imputed_requests"], json!(0));
    assert_eq!(replayed["failed_after_first_token"], json!(stalled));
    // The brown-out did what it is for: the breaker opened and saved
    // requests the deadline would otherwise have cost.
    let opens = replayed["breaker_opens"].as_u64().unwrap();
    assert!(opens >= 1);
    // /metrics shows the breaker serve ran: as often opened. Reading it
    // learns the last requests' outcomes too, which no later request of the
    // replay does: they may open it once more, and then it is open.
    let opened_once_more = metrics.contains(&format!(
        "routeval_breaker_opens_total{{route=\"large\"}} {}\n",
        opens + 1
    )) && metrics.contains("routeval_breaker_state{route=\"large\"} 1\n");
    assert!(
        metrics.contains(&format!(
            "routeval_breaker_opens_total{{route=\"large\"}} {opens}\n"
        )) || opened_once_more,
        "{metrics}"
    );
    assert!(metrics.contains("routeval_breaker_state{route=\"large\"} "));
    assert!(count_reason(&own, "fallback:breaker") >= 1);
    assert!(!attempts.is_empty());
}

#[test]
fn a_dead_primarys_requests_move_only_as_far_as_the_fallbacks_rpm_allows() {
    let setup = Fallback::new();
    let (_dead, config) = dead_primary(&setup, "dead-capacity");
    // The budget allows every move; the fallback's rpm does not.
    let by_capacity = setup.path("capacity-records");
    let served = start_serve(
        &config,
        &setup.pubkey(),
        &setup.router(),
        &setup.keys,
        &by_capacity,
        &["--retry-budget", "1", "--retry-budget-min", "0"],
    );
    let responses = one_by_one(&served, &setup.prompts, 12, false);
    served.stop();
    assert_eq!(answered_by_backup(&responses), 5);
    for response in responses
        .iter()
        .filter(|response| !status_line(response).contains(" 200"))
    {
        // The primary's own error, passed on.
        assert!(status_line(response).contains(" 500"), "{response}");
        assert_eq!(header_of(response, "x-routeval-route"), "large");
    }
    let rows = records_of(&by_capacity);
    let own: Vec<&Value> = rows.iter().filter(|row| !is_attempt(row)).collect();
    assert_eq!(own.len(), 12);
    assert_eq!(count_reason(&own, "fallback:error"), 5);
    assert_eq!(count_reason(&own, "no-fallback:capacity"), 7);
    assert_eq!(rows.len() - own.len(), 5, "one abandoned attempt per move");
}

#[test]
fn a_dead_primarys_requests_move_only_as_far_as_the_retry_budget_allows() {
    let setup = Fallback::new();
    let (_dead, config) = dead_primary(&setup, "dead-budget");
    // The fallback has room; the budget (a fifth of the requests) binds.
    let by_budget = setup.path("budget-records");
    let served = start_serve(
        &config,
        &setup.pubkey(),
        &setup.router(),
        &setup.keys,
        &by_budget,
        &[
            "--retry-budget",
            "0.2",
            "--retry-budget-min",
            "0",
            "--retry-budget-window-s",
            "600",
        ],
    );
    let responses = one_by_one(&served, &setup.prompts, 20, false);
    let metrics = std::process::Command::new("curl")
        .args(["-s", &served.url("/metrics")])
        .output()
        .unwrap();
    served.stop();
    let moved = answered_by_backup(&responses);
    assert_eq!(moved, 4, "a fifth of 20 requests");
    let rows = records_of(&by_budget);
    let own: Vec<&Value> = rows.iter().filter(|row| !is_attempt(row)).collect();
    assert_eq!(count_reason(&own, "fallback:error"), 4);
    assert_eq!(count_reason(&own, "no-fallback:budget"), 16);
    let metrics = String::from_utf8(metrics.stdout).unwrap();
    assert!(
        metrics.contains(
            "routeval_requests_total{route=\"backup\",reason=\"fallback:error\",status=\"ok\"} 4"
        ),
        "{metrics}"
    );
}

#[test]
fn a_tenants_signed_limits_refuse_its_requests_past_them_with_429() {
    let setup = Fallback::new();
    // A tenant's limits, signed in [serving.tenants]: the demo tenant may
    // have one request in flight; every other tenant 600 tokens a minute.
    let slow = start_sim(
        &setup.dataset,
        SimSettings {
            ttft_ms: 1_500,
            ..SimSettings::default()
        },
    );
    let limited = falling_back(&base_url(&slow), &base_url(&setup.backup), "", 20_000)
        + "\n[serving.tenants.demo]\nmax_in_flight = 1\n\n[serving.tenants.\"*\"]\ntpm = 600\n";
    let config = signed_table(setup.pipeline, "resilience-tenants", &limited);
    let served = start_serve(
        &config,
        &setup.pubkey(),
        &setup.router(),
        &setup.keys,
        &setup.path("tenant-records"),
        &[],
    );
    let (_, slice, prompt) = &setup.prompts[0];
    let body = json!({
        "model": "support-assistant",
        "max_tokens": 400,
        "messages": [{"role": "user", "content": prompt}],
    });
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| served.post(KEY, slice, &body, &[]));
        // The first is in flight (its answer takes 1.5 s) when the second
        // arrives.
        std::thread::sleep(std::time::Duration::from_millis(400));
        let second = served.post(KEY, slice, &body, &[]);
        (first.join().unwrap(), second)
    });
    assert!(status_line(&first).contains(" 200"), "{first}");
    assert!(status_line(&second).contains(" 429"), "{second}");
    assert_eq!(header_of(&second, "retry-after"), "1");
    assert!(second.contains("max_in_flight"), "{second}");
    // The EU tenant's first request reserves its prompt and 400 tokens;
    // the second in the same minute would pass 600.
    let eu_first = served.post(EU_KEY, slice, &body, &[]);
    let eu_second = served.post(EU_KEY, slice, &body, &[]);
    served.stop();
    assert!(status_line(&eu_first).contains(" 200"), "{eu_first}");
    assert!(status_line(&eu_second).contains(" 429"), "{eu_second}");
    let rows = records_of(&setup.path("tenant-records"));
    let rows: Vec<&Value> = rows.iter().collect();
    assert_eq!(count_reason(&rows, "admission:tenant"), 1);
    assert_eq!(count_reason(&rows, "admission:tenant-tpm"), 1);
}

/// A serve-sim whose first token comes in 20 ms, or for half the requests
/// (drawn with `seed`) in 1.5 s: a route worth hedging.
fn late_half_the_time(setup: &Fallback, seed: u64) -> routeval::upstream_sim::RunningSim {
    start_sim(
        &setup.dataset,
        SimSettings {
            ttft_ms: 20,
            seed,
            faults: FaultProfile {
                slow_first_token: 0.5,
                slow_first_token_ms: 1_500,
                ..FaultProfile::default()
            },
            ..SimSettings::default()
        },
    )
}

#[test]
fn a_late_first_token_is_hedged_the_first_answer_wins_and_the_copy_is_cancelled() {
    let setup = Fallback::new();
    // Hedging: a short request with no first token 200 ms after it was
    // sent gets a copy; the first first token answers, the other copy is
    // cancelled, and both are recorded.
    let hedged_sim = late_half_the_time(&setup, 3);
    let hedging = falling_back(
        &base_url(&hedged_sim),
        &base_url(&setup.backup),
        "\n[routes.hedge]\nafter_ms = 200.0\nmax_prompt_tokens = 100000\n",
        20_000,
    );
    let config = signed_table(setup.pipeline, "resilience-hedging", &hedging);
    let hedge_records = setup.path("hedge-records");
    let served = setup.serve_unbudgeted(&config, &hedge_records);
    let requests = 12;
    for response in one_by_one(&served, &setup.prompts, requests, true) {
        assert!(response.contains("data: [DONE]"), "{response}");
    }
    served.stop();
    // Long enough for a copy that was not cancelled to finish its answer.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let rows = records_of(&hedge_records);
    let lost: Vec<&Value> = rows
        .iter()
        .filter(|row| row["reason"] == "hedge-lost")
        .collect();
    let own: Vec<&Value> = rows
        .iter()
        .filter(|row| row["reason"] != "hedge-lost")
        .collect();
    assert_eq!(own.len(), requests);
    assert!(!lost.is_empty(), "nothing was hedged: {rows:?}");
    assert_eq!(count_reason(&own, "hedge-won"), lost.len());
    for row in &own {
        let ttft = row["ttft_ms"].as_f64().unwrap();
        if row["reason"] == "hedge-won" {
            assert!(ttft >= 200.0, "{row}");
        } else {
            assert!(ttft < 200.0, "answered before any hedge: {row}");
        }
    }
    for row in &lost {
        assert_billed_its_prompt(row);
        let of = row["id"]
            .as_str()
            .unwrap()
            .strip_suffix(routeval::records::HEDGE_ID_SUFFIX)
            .unwrap();
        assert!(
            own.iter()
                .any(|request| request["id"] == of && request["reason"] == "hedge-won")
        );
    }
    let stats = hedged_sim.stats();
    assert_eq!(stats.requests, (requests + lost.len()) as u64);
    // Every loser was cancelled before it finished: the sim completed one
    // answer per request.
    assert_eq!(
        stats.completed.values().sum::<u64>(),
        requests as u64,
        "{stats:?}"
    );
    routeval()
        .args(["replay", "hedge", "--records"])
        .arg(&hedge_records)
        .assert()
        .success();
}

#[test]
fn a_request_that_fell_back_and_was_then_hedged_keeps_its_fallback_reason() {
    let setup = Fallback::new();
    // Every call to the primary fails before its first token; the fallback
    // is hedged, and half its first tokens come late, so some moved
    // requests are hedged too. The move decided their route: their reason
    // stays `fallback:error`, and each hedge's lost copy is its own record.
    let dead = always_failing(&setup);
    let slow_backup = late_half_the_time(&setup, 5);
    let table = falling_back(&base_url(&dead), &base_url(&slow_backup), "", 20_000);
    let hedged_backup = table.replacen(
        "tpm = 100000000\n",
        "tpm = 100000000\n\n[routes.hedge]\nafter_ms = 200.0\nmax_prompt_tokens = 100000\n",
        1,
    );
    assert_ne!(hedged_backup, table, "the backup route was not hedged");
    let config = signed_table(setup.pipeline, "resilience-fallback-hedged", &hedged_backup);
    let records = setup.path("fallback-hedged-records");
    let served = setup.serve_unbudgeted(&config, &records);
    let requests = 12;
    for response in one_by_one(&served, &setup.prompts, requests, true) {
        assert!(response.contains("data: [DONE]"), "{response}");
        assert_eq!(header_of(&response, "x-routeval-route"), "backup");
    }
    served.stop();
    let rows = records_of(&records);
    let own: Vec<&Value> = rows
        .iter()
        .filter(|row| row["reason"] != "hedge-lost" && !is_attempt(row))
        .collect();
    let lost: Vec<&Value> = rows
        .iter()
        .filter(|row| row["reason"] == "hedge-lost")
        .collect();
    assert_eq!(own.len(), requests, "{rows:?}");
    assert_eq!(rows.iter().filter(|row| is_attempt(row)).count(), requests);
    assert!(!lost.is_empty(), "no moved request was hedged: {rows:?}");
    assert_eq!(count_reason(&own, "fallback:error"), requests, "{own:?}");
    assert_eq!(count_reason(&own, "hedge-won"), 0, "{own:?}");
    for row in &lost {
        assert_eq!(row["route"], "backup", "{row}");
        let of = row["id"]
            .as_str()
            .unwrap()
            .strip_suffix(routeval::records::HEDGE_ID_SUFFIX)
            .unwrap();
        assert!(own.iter().any(|request| request["id"] == of), "{row}");
    }
}
