//! The simulated endpoint over real HTTP on loopback: answers, streaming,
//! errors, faults and the counts it keeps.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use routeval::rubric::load_rubrics;
use routeval::schema::{DatasetRow, read_dataset};
use routeval::upstream_sim::{Fault, FaultProfile, SimSettings, spawn};
use serde_json::{Value, json};

fn demo() -> (
    Vec<DatasetRow>,
    std::collections::BTreeMap<String, routeval::rubric::Rubric>,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rubrics = load_rubrics(&root.join("rubrics")).unwrap();
    let names: BTreeSet<String> = rubrics.keys().cloned().collect();
    (
        read_dataset(&root.join("datasets/demo/prompts.jsonl"), &names).unwrap(),
        rubrics,
    )
}

/// Status, headers (lower-cased names) and de-chunked body.
type Exchange = (u16, Vec<(String, String)>, String);

/// A raw HTTP/1.1 exchange, or an error when the connection broke.
fn http(address: SocketAddr, method: &str, path: &str, body: &str) -> Result<Exchange, String> {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|error| error.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(name, value)| name == "transfer-encoding" && value == "chunked");
    if !chunked {
        return Ok((status, headers, rest.to_owned()));
    }
    let (mut body, mut rest) = (String::new(), rest);
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or("connection broke inside a chunk")?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| "bad chunk size")?;
        if size == 0 {
            return Ok((status, headers, body));
        }
        if after.len() < size + 2 {
            return Err("connection broke inside a chunk".to_owned());
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

fn request(model: &str, prompt: &str, stream: bool) -> String {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
        "stream_options": {"include_usage": true},
        "seed": 1
    })
    .to_string()
}

/// The content, finish reason and usage of an SSE body.
fn read_stream(body: &str) -> (String, Option<String>, Option<Value>, bool) {
    let (mut content, mut finish, mut usage, mut done) = (String::new(), None, None, false);
    for data in body.lines().filter_map(|line| line.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(choice) = chunk["choices"].get(0) {
            content.push_str(choice["delta"]["content"].as_str().unwrap_or_default());
            if let Some(reason) = choice["finish_reason"].as_str() {
                finish = Some(reason.to_owned());
            }
        }
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
    }
    (content, finish, usage, done)
}

#[test]
fn answers_stream_and_report_usage_like_an_openai_endpoint() {
    let (rows, _) = demo();
    let sim = spawn(
        SimSettings::default(),
        &rows,
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let prompt = &rows[0].messages[0].content;

    let (status, _, body) = http(
        sim.address,
        "POST",
        "/v1/chat/completions",
        &request("sim-large", prompt, false),
    )
    .unwrap();
    assert_eq!(status, 200);
    let whole: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(whole["model"], "sim-large-2026-11-01");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    assert!(whole["usage"]["prompt_tokens"].as_u64().unwrap() > 10);

    let (status, headers, body) = http(
        sim.address,
        "POST",
        "/v1/chat/completions",
        &request("sim-large", prompt, true),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        headers
            .iter()
            .any(|(name, value)| name == "content-type" && value == "text/event-stream")
    );
    let (content, finish, usage, done) = read_stream(&body);
    assert_eq!(
        content,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(finish.as_deref(), Some("stop"));
    assert_eq!(usage.unwrap(), whole["usage"]);
    assert!(done);

    let (status, _, body) = http(sim.address, "GET", "/v1/models", "").unwrap();
    assert_eq!(status, 200);
    let models: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        models,
        ["sim-small", "sim-large", "sim-verifier", "sim-mid"]
    );

    assert_eq!(
        http(
            sim.address,
            "POST",
            "/v1/chat/completions",
            &request("gpt-9", prompt, false)
        )
        .unwrap()
        .0,
        404
    );
    assert_eq!(
        http(
            sim.address,
            "POST",
            "/v1/chat/completions",
            r#"{"model": "sim-small"}"#
        )
        .unwrap()
        .0,
        400
    );
    let stats = sim.stats();
    assert_eq!(stats.requests, 4);
    assert_eq!(stats.by_status[&200], 2);
    assert_eq!(stats.completed[&format!("sim-large|{}|1", rows[0].id)], 2);
}

#[test]
fn the_large_model_is_right_more_often_on_the_demo_data() {
    let (rows, rubrics) = demo();
    let sim = spawn(
        SimSettings::default(),
        &rows,
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let quality = |model: &str| {
        let passed = rows
            .iter()
            .filter(|row| {
                let (_, _, body) = http(
                    sim.address,
                    "POST",
                    "/v1/chat/completions",
                    &request(model, &row.messages[0].content, false),
                )
                .unwrap();
                let answer: Value = serde_json::from_str(&body).unwrap();
                let text = answer["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                rubrics[&row.rubric]
                    .grade(&text, row.reference.as_deref())
                    .pass
            })
            .count();
        passed as f64 / rows.len() as f64
    };
    let (small, large) = (quality("sim-small"), quality("sim-large"));
    assert!(small > 0.3 && small < 0.9, "small {small}");
    assert!(
        large > 0.9 && large > small + 0.1,
        "large {large}, small {small}"
    );
}

#[test]
fn faults_arrive_as_configured() {
    let (rows, _) = demo();
    let prompt = rows[0].messages[0].content.clone();
    let with = |faults: FaultProfile| {
        spawn(
            SimSettings {
                faults,
                ..SimSettings::default()
            },
            &rows,
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap()
    };

    let limited = with(FaultProfile {
        rate_limit: 1.0,
        retry_after_s: 7,
        ..FaultProfile::default()
    });
    let (status, headers, _) = http(
        limited.address,
        "POST",
        "/v1/chat/completions",
        &request("sim-small", &prompt, true),
    )
    .unwrap();
    assert_eq!(status, 429);
    assert!(headers.contains(&("retry-after".to_owned(), "7".to_owned())));

    let cut = with(FaultProfile {
        cut_stream: 1.0,
        ..FaultProfile::default()
    });
    let (status, _, body) = http(
        cut.address,
        "POST",
        "/v1/chat/completions",
        &request("sim-small", &prompt, true),
    )
    .unwrap();
    assert_eq!(status, 200);
    let (_, finish, _, done) = read_stream(&body);
    assert_eq!((finish, done), (None, false));
    assert!(
        cut.stats().completed.is_empty(),
        "a cut stream is not a completed answer"
    );

    let reset = with(FaultProfile {
        reset: 1.0,
        ..FaultProfile::default()
    });
    assert!(
        http(
            reset.address,
            "POST",
            "/v1/chat/completions",
            &request("sim-small", &prompt, true)
        )
        .is_err()
    );

    let malformed = with(FaultProfile {
        malformed_chunk: 1.0,
        ..FaultProfile::default()
    });
    let (_, _, body) = http(
        malformed.address,
        "POST",
        "/v1/chat/completions",
        &request("sim-small", &prompt, true),
    )
    .unwrap();
    assert!(
        body.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .any(|data| data != "[DONE]" && serde_json::from_str::<Value>(data).is_err())
    );

    let unavailable = with(FaultProfile {
        unavailable: 0.5,
        ..FaultProfile::default()
    });
    for _ in 0..40 {
        let _ = http(
            unavailable.address,
            "POST",
            "/v1/chat/completions",
            &request("sim-small", &prompt, false),
        );
    }
    let stats = unavailable.stats();
    assert_eq!(stats.requests, 40);
    assert_eq!(
        stats.faults.get(&Fault::Unavailable).copied().unwrap_or(0),
        stats.by_status[&503]
    );
    assert!((10..=30).contains(&stats.by_status[&503]), "{stats:?}");
}

#[test]
fn the_command_prints_its_address_and_serves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut child, line) = crate::common::first_line(
        std::process::Command::new(env!("CARGO_BIN_EXE_routeval"))
            .args(["serve-sim", "--listen", "127.0.0.1:0", "--dataset"])
            .arg(root.join("datasets/demo/prompts.jsonl"))
            .arg("--rubrics")
            .arg(root.join("rubrics")),
    );
    let address: SocketAddr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .parse()
        .unwrap();
    assert!(line.starts_with("serving 300 prompts on http://"));
    let (status, _, _) = http(address, "GET", "/v1/models", "").unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    assert_eq!(status, 200);
}
