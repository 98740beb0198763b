//! `routeval serve` through the binary against the numbers a client with a
//! valid key or a route controls, at their extremes: `max_tokens` past
//! 2^63, usage past 2^64, cached tokens above prompt tokens, an empty
//! slice. Each is answered or refused, never a 500; serve stays whole for
//! every tenant after it; and what serve journals rolls, reads back and
//! lets serve start again on the same directory.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::{
    KEY, Pipeline, Received, ScriptedUpstream, Served, Step, response, routeval, served_records,
    signed_single, start_serve, status_of, write_keys,
};

/// A route whose answer reports the usage the prompt asks for: a user
/// message `usage {…}` gets that object as its `usage`.
fn reporting_usage(received: &Received) -> Vec<Step> {
    let request: Value = serde_json::from_slice(&received.body).unwrap_or_default();
    let content = request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    let usage = content.strip_prefix("usage ").map_or_else(
        || json!({"prompt_tokens": 9, "completion_tokens": 2}),
        |asked| serde_json::from_str(asked).unwrap(),
    );
    let body = json!({
        "id": "chatcmpl-numbers",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": "scripted-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "ok"},
            "finish_reason": "stop",
        }],
        "usage": usage,
    });
    vec![Step::Send(response(
        "200 OK",
        &[],
        "application/json",
        body.to_string().as_bytes(),
    ))]
}

fn get(served: &Served, path: &str) -> String {
    let output = Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .arg(served.url(path))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A chat request of `content`, with `extra` fields set as a client sends
/// them (raw JSON, so that integers past 2^64 stay integers).
fn chat(content: &str, extra: &str) -> String {
    let mut body = json!({
        "model": "support-assistant",
        "messages": [{"role": "user", "content": content}],
    })
    .to_string();
    if !extra.is_empty() {
        body.pop();
        body.push_str(&format!(",{extra}}}"));
    }
    body
}

fn post_raw(served: &Served, body: &str, headers: &[&str]) -> String {
    let mut command = Command::new("curl");
    command
        .args(["-s", "-i", "--max-time", "20"])
        .args(["-H", &format!("Authorization: Bearer {KEY}")])
        .args(["-H", "Content-Type: application/json"]);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command
        .args(["-d", body])
        .arg(served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// serve stays whole: an ordinary request answers, `/metrics` and
/// `/readyz` answer.
fn still_whole(served: &Served, after: &str) {
    let ordinary = post_raw(served, &chat("How do I reset my password?", ""), &[]);
    assert_eq!(status_of(&ordinary), 200, "after {after}: {ordinary}");
    let metrics = get(served, "/metrics");
    assert_eq!(status_of(&metrics), 200, "after {after}: {metrics}");
    assert!(metrics.contains("routeval_requests_total"), "{metrics}");
    assert_eq!(status_of(&get(served, "/readyz")), 200, "after {after}");
}

#[test]
fn extreme_numbers_from_a_client_or_a_route_never_take_serve_down_or_block_its_records() {
    let upstream = ScriptedUpstream::start(reporting_usage);
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, &upstream.base_url(), "numbers", None);
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let records = directory.path().join("records");
    let command = || {
        let mut command = pipeline.serve_demo(&config, &keys, &records);
        command.arg("--trust-slice-header");
        command
    };
    let served = Served::start(&mut command());
    let max = u64::MAX.to_string();
    let half = (1_u64 << 63).to_string();
    let beyond = "123456789012345678901234567890";
    let client_numbers = [
        format!("\"max_tokens\":{half}"),
        format!("\"max_tokens\":{half}"),
        format!("\"max_tokens\":{max}"),
        format!("\"max_completion_tokens\":{max}"),
        format!("\"max_tokens\":{beyond}"),
        "\"max_tokens\":-1".to_owned(),
        "\"max_tokens\":1e308".to_owned(),
        format!("\"n\":{max}"),
        format!("\"top_logprobs\":{max}"),
        "\"temperature\":1e308".to_owned(),
    ];
    let mut asked = 0;
    for extra in &client_numbers {
        let answer = post_raw(&served, &chat("How do I reset my password?", extra), &[]);
        let status = status_of(&answer);
        assert!(status < 500, "{extra}: {answer}");
        asked += 1;
        still_whole(&served, extra);
        asked += 1;
    }
    let route_numbers = [
        json!({"prompt_tokens": u64::MAX, "completion_tokens": 2}),
        json!({"prompt_tokens": u64::MAX, "completion_tokens": u64::MAX}),
        json!({"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 40}}),
        json!({"prompt_tokens": 2_000_000_000_000_000_u64, "completion_tokens": 2}),
        json!({"prompt_tokens": -5, "completion_tokens": 1e300}),
    ];
    for usage in &route_numbers {
        let answer = post_raw(&served, &chat(&format!("usage {usage}"), ""), &[]);
        assert_eq!(status_of(&answer), 200, "{usage}: {answer}");
        asked += 1;
        still_whole(&served, &usage.to_string());
        asked += 1;
    }
    // An empty slice claimed by header is no claim: the tenant's slice.
    let unclaimed = post_raw(
        &served,
        &chat("How do I reset my password?", ""),
        &["x-routeval-slice: "],
    );
    assert_eq!(status_of(&unclaimed), 200, "{unclaimed}");
    asked += 1;
    served.stop();
    let rows = served_records(
        &records,
        &[
            "id",
            "slice",
            "input_tokens",
            "cached_input_tokens",
            "cost_usd",
        ],
    );
    assert_eq!(rows.len(), asked, "{rows:?}");
    assert!(rows.iter().all(|row| row["slice"] != ""), "{rows:?}");
    let cached_apart = rows
        .iter()
        .find(|row| row["cached_input_tokens"].as_f64() == Some(40.0))
        .unwrap_or_else(|| panic!("no answer counted cached tokens apart: {rows:?}"));
    assert_eq!(
        cached_apart["input_tokens"].as_f64(),
        Some(45.0),
        "{cached_apart}"
    );
    assert!(
        rows.iter().all(|row| row["input_tokens"]
            .as_f64()
            .is_none_or(|tokens| tokens <= 1e15)),
        "{rows:?}"
    );
    // What serve wrote reads back whole, and serve starts again on it.
    routeval()
        .args(["replay", "hedge", "--records"])
        .arg(&records)
        .assert()
        .success();
    let again = Served::start(&mut command());
    still_whole(&again, "a restart");
    again.stop();
}

#[test]
fn a_keys_file_that_gives_a_key_an_empty_slice_is_refused_at_start() {
    let upstream = ScriptedUpstream::start(reporting_usage);
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, &upstream.base_url(), "numbers-keys", None);
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    let digest = routeval::digest::sha256_hex(KEY.as_bytes());
    std::fs::write(
        &keys,
        format!("[[keys]]\nsha256 = \"{digest}\"\ntenant = \"demo\"\nslice = \"\"\n"),
    )
    .unwrap();
    let records = directory.path().join("records");
    // A serve that took the file would listen until killed.
    let output = assert_cmd::Command::from_std(pipeline.serve_demo(&config, &keys, &records))
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("keys[0]: slice is empty"), "{stderr}");
    assert!(!records.exists(), "nothing written");
}

#[test]
fn the_numbers_a_client_writes_reach_the_route_as_written() {
    let upstream = ScriptedUpstream::start(reporting_usage);
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, &upstream.base_url(), "numbers-as-written", None);
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let served = start_serve(
        &config,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        &keys,
        &directory.path().join("records"),
        &[],
    );
    let written = [
        "\"seed\":123456789012345678901234567890",
        "\"temperature\":1e-1",
        "\"top_p\":1.0",
        "\"metadata\":{\"trace\":18446744073709551616}",
    ];
    let answer = post_raw(
        &served,
        &chat("How do I reset my password?", &written.join(",")),
        &[],
    );
    served.stop();
    assert_eq!(status_of(&answer), 200, "{answer}");
    let requests = upstream.requests();
    let sent = String::from_utf8_lossy(&requests[0].body);
    for member in written {
        assert!(sent.contains(member), "{member} not in {sent}");
    }
    // Only what serve must say is its own: the route's model, and a
    // stream with its usage.
    let sent: Value = serde_json::from_str(&sent).unwrap();
    assert_ne!(sent["model"], "support-assistant");
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
}
