//! `routeval serve` as a tier-0 hop, through the binary, against clients and
//! upstreams that misbehave on purpose: upstreams that redirect, echo the
//! route's key, rate-limit, send streams a client cannot read or that never
//! end a line, linger after `[DONE]` or answer late; clients that send half
//! a request, leave early, or have no key. Each test is one behaviour.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{
    KEY, Pipeline, Received, ScriptedUpstream, Served, Step, completion, falling_back, log_events,
    response, served_records, signed_single, signed_table, sse_chunk, sse_head, status_of,
    write_keys,
};

/// serve in front of one upstream, with its records directory.
struct Front {
    served: Served,
    records: PathBuf,
    _directory: tempfile::TempDir,
}

impl Front {
    /// serve of a config signed for `base_url` (gated as `name`), with
    /// `extra` flags; `descriptors` runs it under that open-file limit.
    fn start(base_url: &str, name: &str, extra: &[&str], descriptors: Option<u32>) -> Front {
        let config = signed_single(Pipeline::shared(), base_url, name, None);
        Front::serving(&config, extra, descriptors)
    }

    /// serve of `config`.
    fn serving(config: &Path, extra: &[&str], descriptors: Option<u32>) -> Front {
        Front::run(Front::command(config, extra), descriptors)
    }

    /// The command that serves `config`, and the directory of its keys and
    /// records.
    fn command(config: &Path, extra: &[&str]) -> (Command, tempfile::TempDir) {
        let pipeline = Pipeline::shared();
        let directory = tempfile::tempdir().unwrap();
        let keys = directory.path().join("keys.toml");
        write_keys(&keys);
        let records = directory.path().join("records");
        let mut command = pipeline.serve_demo(config, &keys, &records);
        command.args(extra);
        (command, directory)
    }

    fn run(
        (mut command, directory): (Command, tempfile::TempDir),
        descriptors: Option<u32>,
    ) -> Front {
        let records = directory.path().join("records");
        let served = match descriptors {
            None => Served::start(&mut command),
            Some(limit) => {
                let mut limited = Command::new("sh");
                limited
                    .args(["-c", &format!("ulimit -n {limit} && exec \"$@\""), "sh"])
                    .arg(command.get_program())
                    .args(command.get_args());
                for (name, value) in command.get_envs() {
                    if let Some(value) = value {
                        limited.env(name, value);
                    }
                }
                Served::start(&mut limited)
            }
        };
        Front {
            served,
            records,
            _directory: directory,
        }
    }

    fn address(&self) -> String {
        self.served.url("").trim_start_matches("http://").to_owned()
    }

    /// Stops serve and reads every record it wrote.
    fn stop(self) -> Vec<Value> {
        self.served.stop();
        served_records(
            &self.records,
            &["id", "route", "reason", "status", "finish_reason"],
        )
    }
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "support-assistant",
        "stream": stream,
        "messages": [{"role": "user", "content": "How do I reset my password?"}],
    })
}

/// `curl -i` of `path` with `flags`: the response's head and body.
fn curl(front: &Front, path: &str, flags: &[&str]) -> String {
    let output = Command::new("curl")
        .args(["-s", "-i", "--max-time", "20"])
        .args(flags)
        .arg(front.served.url(path))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A chat request with `key` (and `headers`), by curl.
fn post(front: &Front, key: &str, body: &Value, headers: &[&str]) -> String {
    let authorization = format!("Authorization: Bearer {key}");
    let text = body.to_string();
    let mut flags = vec!["-H", &authorization, "-d", &text];
    for header in headers {
        flags.extend(["-H", header]);
    }
    curl(front, "/v1/chat/completions", &flags)
}

fn header(response: &str, name: &str) -> Option<String> {
    let head = response.split("\r\n\r\n").next().unwrap_or_default();
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}

fn body_of(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {response}"))
}

/// The head of a raw chat request with `key`, whose body is `length` long.
fn raw_head(key: &str, length: usize, extra: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: serve\r\nAuthorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    )
}

fn answering(body: Vec<u8>) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    move |_: &Received| {
        vec![Step::Send(response(
            "200 OK",
            &[],
            "application/json",
            &body,
        ))]
    }
}

#[test]
fn an_upstream_redirect_is_an_error_and_the_prompt_never_reaches_its_target() {
    let target = ScriptedUpstream::start(answering(completion("from the redirect target")));
    let location = format!("location: {}/chat/completions", target.base_url());
    let redirecting = ScriptedUpstream::start(move |_: &Received| {
        vec![Step::Send(response(
            "307 Temporary Redirect",
            &[&location],
            "text/plain",
            b"",
        ))]
    });
    let front = Front::start(&redirecting.base_url(), "hostile-redirect", &[], None);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 502, "{answer}");
    let message = body_of(&answer)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("redirect"), "{message}");
    assert!(!answer.contains(&target.port.to_string()), "{answer}");
    assert_eq!(redirecting.requests().len(), 1);
    assert_eq!(target.requests().len(), 0, "the prompt went to the target");
}

#[test]
fn an_upstream_429_passes_its_retry_after_and_rate_limit_headers_to_the_client() {
    let limited = ScriptedUpstream::start(|_: &Received| {
        vec![Step::Send(response(
            "429 Too Many Requests",
            &[
                "retry-after: 2",
                "x-ratelimit-remaining-requests: 0",
                "x-ratelimit-reset-requests: 2s",
            ],
            "application/json",
            br#"{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}"#,
        ))]
    });
    let front = Front::start(&limited.base_url(), "hostile-429", &[], None);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 429, "{answer}");
    assert_eq!(header(&answer, "retry-after").as_deref(), Some("2"));
    assert_eq!(
        header(&answer, "x-ratelimit-remaining-requests").as_deref(),
        Some("0")
    );
    assert_eq!(
        header(&answer, "x-ratelimit-reset-requests").as_deref(),
        Some("2s")
    );
    assert_eq!(body_of(&answer)["error"]["message"], "slow down");
}

#[test]
fn an_upstream_error_that_echoes_the_routes_key_never_reaches_the_client() {
    let echoing = ScriptedUpstream::start(|request: &Received| {
        // A 400, whose body reaches the client when it is clean: a 401 or
        // 403 never passes on (serve_wire).
        let body = json!({"error": {
            "message": format!("bad request with {:?}", request.header("authorization")),
            "type": "invalid_request_error",
        }});
        vec![Step::Send(response(
            "400 Bad Request",
            &[],
            "application/json",
            body.to_string().as_bytes(),
        ))]
    });
    let front = Front::start(&echoing.base_url(), "hostile-echo", &[], None);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert!(
        echoing.requests()[0]
            .header("authorization")
            .unwrap()
            .contains("unused-by-serve-sim"),
        "the upstream got the route's key"
    );
    assert!(!answer.contains("unused-by-serve-sim"), "{answer}");
    assert_eq!(status_of(&answer), 400, "{answer}");
    let message = body_of(&answer)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("withheld"), "{message}");
}

#[test]
fn a_rate_limit_header_that_echoes_the_routes_key_never_reaches_the_client() {
    let echoing = ScriptedUpstream::start(|request: &Received| {
        let key = request.header("authorization").unwrap_or_default();
        let echoed = format!("x-ratelimit-limit-requests: 60; key={key}");
        vec![Step::Send(response(
            "200 OK",
            &[&echoed, "x-ratelimit-remaining-requests: 59"],
            "application/json",
            &completion("hi"),
        ))]
    });
    let front = Front::start(&echoing.base_url(), "hostile-echo-header", &[], None);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(!answer.contains("unused-by-serve-sim"), "{answer}");
    assert_eq!(header(&answer, "x-ratelimit-limit-requests"), None);
    assert_eq!(
        header(&answer, "x-ratelimit-remaining-requests").as_deref(),
        Some("59")
    );
}

#[test]
fn an_upstream_error_page_that_names_its_host_is_replaced_by_an_openai_error() {
    let page = ScriptedUpstream::start(|_: &Received| {
        vec![Step::Send(response(
            "503 Service Unavailable",
            &[],
            "text/html",
            b"<html>upstream 127.0.0.1 is down</html>",
        ))]
    });
    let front = Front::start(&page.base_url(), "hostile-page", &[], None);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(!answer.contains("127.0.0.1"), "{answer}");
    assert_eq!(body_of(&answer)["error"]["code"], "503");
}

#[test]
fn an_unreachable_route_is_named_by_its_name_never_its_address() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let front = Front::start(
        &format!("http://127.0.0.1:{port}/v1"),
        "hostile-unreachable",
        &[],
        None,
    );
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 502, "{answer}");
    let message = body_of(&answer)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.starts_with("route \""), "{message}");
    assert!(!message.contains(&port.to_string()), "{message}");
    assert!(!message.contains("127.0.0.1"), "{message}");
}

#[test]
fn a_malformed_stream_event_ends_the_stream_with_an_openai_error_event() {
    let garbling = ScriptedUpstream::start(|_: &Received| {
        let mut bytes = sse_head();
        bytes.extend(sse_chunk("Hel", None));
        bytes.extend(b"data: {not json\n\n");
        bytes.extend(sse_chunk("lo", Some("stop")));
        vec![Step::Send(bytes)]
    });
    let front = Front::start(&garbling.base_url(), "hostile-garbled", &[], None);
    let answer = post(&front, KEY, &chat(true), &["Accept: text/event-stream"]);
    assert!(answer.contains("\"Hel\""), "{answer}");
    assert!(!answer.contains("{not json"), "{answer}");
    assert!(!answer.contains("\"lo\""), "{answer}");
    let last = answer.trim_end().lines().last().unwrap();
    let event: Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(event["error"]["type"], "upstream_error", "{last}");
    let records = front.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "error");
    assert_eq!(records[0]["finish_reason"], "upstream_malformed");
}

/// One upstream for a primary (`large`) and its fallback (`backup`): the
/// primary gives its first token and then does what `primary` says; the
/// fallback answers "from the fallback" at once.
/// The fallback's answer, at once, when `received` is a call to it (the
/// fallback route is `sim-small`).
fn fallback_answer(received: &Received) -> Option<Vec<Step>> {
    let body: Value = serde_json::from_slice(&received.body).unwrap();
    if body["model"] != "sim-small-2026-11-01" {
        return None;
    }
    let mut answer = sse_head();
    answer.extend(sse_chunk("from the fallback", Some("stop")));
    answer.extend(b"data: [DONE]\n\n");
    Some(vec![Step::Send(answer)])
}

fn primary_breaking_after_its_first_token(primary: Vec<Step>) -> ScriptedUpstream {
    ScriptedUpstream::start(move |received: &Received| {
        if let Some(fallback) = fallback_answer(received) {
            return fallback;
        }
        let mut head = sse_head();
        head.extend(sse_chunk("Hel", None));
        let mut steps = vec![Step::Send(head)];
        steps.extend(primary.iter().cloned());
        steps
    })
}

/// serve of the primary and its fallback on `upstream`, signed as `name`,
/// with a 300 ms stall timer.
fn falling_back_front(upstream: &ScriptedUpstream, name: &str) -> Front {
    let table = falling_back(&upstream.base_url(), &upstream.base_url(), "", 20_000);
    let config = signed_table(Pipeline::shared(), name, &table);
    Front::serving(&config, &["--stall-timeout-ms", "300"], None)
}

/// The content of a non-streamed answer.
fn content_of(answer: &str) -> Value {
    body_of(answer)["choices"][0]["message"]["content"].clone()
}

/// A request that did not stream, answered by the fallback after the
/// primary broke as `primary` says: its records, the request's first and
/// the primary's attempt second.
fn moved_mid_answer(name: &str, primary: Vec<Step>) -> Vec<Value> {
    let upstream = primary_breaking_after_its_first_token(primary);
    let front = falling_back_front(&upstream, name);
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_eq!(content_of(&answer), "from the fallback", "{answer}");
    let mut records = front.stop();
    records.sort_by_key(|record| record["id"].as_str().unwrap().len());
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["route"], "backup");
    assert_eq!(records[0]["status"], "ok");
    assert_eq!(records[1]["route"], "large");
    records
}

#[test]
fn a_request_that_did_not_stream_moves_to_the_fallback_when_its_route_stalls_mid_answer() {
    let records = moved_mid_answer(
        "stalls-mid-answer",
        vec![
            Step::Pause(Duration::from_secs(3)),
            Step::Send(sse_chunk("lo", Some("stop"))),
        ],
    );
    assert_eq!(records[0]["reason"], "fallback:deadline");
    assert_eq!(records[1]["reason"], "abandoned:deadline");
    assert_eq!(records[1]["status"], "timeout");
    assert_eq!(records[1]["finish_reason"], "stall");
}

#[test]
fn a_request_that_did_not_stream_moves_to_the_fallback_when_its_route_cuts_mid_answer() {
    // The primary closes after "Hel", no finish_reason, no [DONE].
    let records = moved_mid_answer("cut-mid-answer", vec![]);
    assert_eq!(records[0]["reason"], "fallback:error");
    assert_eq!(records[1]["reason"], "abandoned:error");
    assert_eq!(records[1]["status"], "error");
    assert_eq!(records[1]["finish_reason"], "upstream_cut");
}

#[test]
fn a_streamed_request_stays_on_its_route_once_its_first_token_was_sent() {
    let upstream = primary_breaking_after_its_first_token(vec![
        Step::Pause(Duration::from_secs(3)),
        Step::Send(sse_chunk("lo", Some("stop"))),
    ]);
    let front = falling_back_front(&upstream, "stalls-streamed");
    let answer = post(&front, KEY, &chat(true), &[]);
    assert!(answer.contains("\"Hel\""), "{answer}");
    assert!(!answer.contains("from the fallback"), "{answer}");
    assert!(
        !answer.contains("[DONE]"),
        "the stream is not finished: {answer}"
    );
    let records = front.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["route"], "large");
    assert_eq!(records[0]["status"], "timeout");
    assert_eq!(records[0]["finish_reason"], "stall");
    // The fallback was never called.
    assert_eq!(upstream.requests().len(), 1);
}

/// An answer of 400 MiB in 1 MiB writes, after `head`; each write made by
/// `piece`.
fn huge(head: Vec<u8>, piece: impl Fn() -> Vec<u8>) -> Vec<Step> {
    let mut steps = vec![Step::Send(head)];
    steps.extend((0..400).map(|_| Step::Send(piece())));
    steps
}

const HUGE_BYTES: u64 = 400 << 20;

/// The most memory serve's process has held (`VmHWM`), in MiB.
fn peak_mib(front: &Front) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", front.served.pid())).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    eprintln!("serve's peak: {} MiB", kib >> 10);
    kib >> 10
}

/// curl of a chat request that throws the answer away: its status and the
/// bytes it received.
fn download(front: &Front, body: &Value) -> (u16, u64) {
    let authorization = format!("Authorization: Bearer {KEY}");
    let output = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download}",
        ])
        .args(["--max-time", "120", "-H", &authorization, "-d"])
        .arg(body.to_string())
        .arg(front.served.url("/v1/chat/completions"))
        .output()
        .unwrap();
    let printed = String::from_utf8(output.stdout).unwrap();
    let (status, size) = printed.split_once(' ').unwrap();
    (status.parse().unwrap(), size.parse().unwrap())
}

#[test]
fn a_400_mib_answer_from_a_route_that_cannot_stream_passes_through_in_bounded_memory() {
    let upstream = ScriptedUpstream::start(|_: &Received| {
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {HUGE_BYTES}\r\nconnection: close\r\n\r\n"
        );
        huge(head.into_bytes(), || vec![b' '; 1 << 20])
    });
    let table = falling_back(
        &upstream.base_url(),
        &upstream.base_url(),
        "stream_upstream = false\n",
        20_000,
    );
    let config = signed_table(Pipeline::shared(), "huge-whole", &table);
    let front = Front::serving(&config, &[], None);
    assert_eq!(download(&front, &chat(false)), (200, HUGE_BYTES));
    // It held 650-790 MiB when it buffered the answer whole.
    let peak = peak_mib(&front);
    assert!(peak < 150, "serve held {peak} MiB at its peak");
    front.stop();
}

#[test]
fn a_400_mib_stream_passes_through_to_a_streaming_client_in_bounded_memory() {
    let event = sse_chunk(&"x".repeat((1 << 20) - 300), None);
    let upstream = ScriptedUpstream::start(move |_: &Received| huge(sse_head(), || event.clone()));
    let front = Front::start(&upstream.base_url(), "huge-stream", &[], None);
    let (status, received) = download(&front, &chat(true));
    assert_eq!(status, 200);
    assert!(received > 400 * ((1 << 20) - 300), "{received} bytes");
    let peak = peak_mib(&front);
    assert!(peak < 150, "serve held {peak} MiB at its peak");
    front.stop();
}

#[test]
fn a_400_mib_stream_for_a_client_that_did_not_stream_is_refused_past_what_serve_assembles() {
    let event = sse_chunk(&"x".repeat((1 << 20) - 300), None);
    let upstream = ScriptedUpstream::start(move |_: &Received| huge(sse_head(), || event.clone()));
    let front = Front::start(&upstream.base_url(), "huge-assembled", &[], None);
    let (status, received) = download(&front, &chat(false));
    assert_eq!(status, 502);
    assert!(received < 4096, "{received} bytes");
    // 64 MiB of events assembled, and no more.
    let peak = peak_mib(&front);
    assert!(peak < 300, "serve held {peak} MiB at its peak");
    let records = front.stop();
    assert_eq!(records[0]["finish_reason"], "upstream_cut");
}

#[test]
fn a_stream_without_line_breaks_is_cut_at_the_event_bound() {
    let endless = ScriptedUpstream::start(|_: &Received| {
        let mut steps = vec![Step::Send(sse_head())];
        steps.extend((0..64).map(|_| Step::Send(vec![b'x'; 64 << 10])));
        steps
    });
    let front = Front::start(&endless.base_url(), "hostile-endless", &[], None);
    let answer = post(&front, KEY, &chat(true), &[]);
    assert!(answer.len() < 64 << 10, "serve passed the line on");
    assert!(answer.contains("longer than"), "{answer}");
    assert_eq!(status_of(&curl(&front, "/healthz", &[])), 200);
    let records = front.stop();
    assert_eq!(records[0]["finish_reason"], "upstream_malformed");
}

#[test]
fn a_stream_read_through_done_is_recorded_answered_though_the_upstream_lingers() {
    let lingering = ScriptedUpstream::start(|_: &Received| {
        let mut bytes = sse_head();
        bytes.extend(sse_chunk("Hello", None));
        bytes.extend(sse_chunk("", Some("stop")));
        bytes.extend(b"data: [DONE]\n\n");
        vec![Step::Send(bytes), Step::Pause(Duration::from_millis(300))]
    });
    let front = Front::start(&lingering.base_url(), "hostile-linger", &[], None);
    let body = chat(true).to_string();
    let mut client = TcpStream::connect(front.address()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(client, "{}{body}", raw_head(KEY, body.len(), "")).unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0; 4096];
    while !String::from_utf8_lossy(&seen).contains("[DONE]") {
        let read = client.read(&mut buffer).unwrap();
        assert!(read > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..read]);
    }
    // As the OpenAI SDK does: the stream is over at [DONE].
    drop(client);
    std::thread::sleep(Duration::from_millis(800));
    let records = front.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "ok", "{records:?}");
    assert_eq!(records[0]["finish_reason"], "stop", "{records:?}");
}

#[test]
fn a_client_that_leaves_before_the_first_byte_still_leaves_one_record() {
    let slow = ScriptedUpstream::start(|_: &Received| {
        vec![
            Step::Pause(Duration::from_millis(1500)),
            Step::Send(response(
                "200 OK",
                &[],
                "application/json",
                &completion("too late"),
            )),
        ]
    });
    let front = Front::start(&slow.base_url(), "hostile-leaver", &[], None);
    let body = chat(false).to_string();
    let mut client = TcpStream::connect(front.address()).unwrap();
    write!(
        client,
        "{}{body}",
        raw_head(KEY, body.len(), "x-request-id: leaver-1\r\n")
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(client);
    std::thread::sleep(Duration::from_millis(2500));
    let records = front.stop();
    assert_eq!(slow.requests().len(), 1);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["id"], "leaver-1");
    assert_eq!(records[0]["status"], "error");
    assert_eq!(records[0]["finish_reason"], "client_disconnected");
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-bearer", &[], None);
    let body = chat(false).to_string();
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let authorization = format!("Authorization: {scheme} {KEY}");
        let answer = curl(
            &front,
            "/v1/chat/completions",
            &["-H", &authorization, "-d", &body],
        );
        assert_eq!(status_of(&answer), 200, "{scheme}: {answer}");
    }
    let answer = curl(
        &front,
        "/v1/chat/completions",
        &["-H", &format!("Authorization: Basic {KEY}"), "-d", &body],
    );
    assert_eq!(status_of(&answer), 401, "{answer}");
}

#[test]
fn a_client_without_a_valid_key_is_refused_before_its_body_is_read() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-upload", &[], None);
    let mut client = TcpStream::connect(front.address()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // A 4 MiB upload announced, 1 KiB of it sent, and no more.
    write!(client, "{}", raw_head("sk-not-a-key", 4 << 20, "")).unwrap();
    client.write_all(&[b' '; 1024]).unwrap();
    let mut answer = [0; 12];
    client
        .read_exact(&mut answer)
        .expect("serve answered before the body");
    assert_eq!(&answer, b"HTTP/1.1 401");
}

#[test]
fn a_request_beyond_max_in_flight_is_refused_before_its_body_is_read() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(
        &upstream.base_url(),
        "hostile-full",
        &["--max-in-flight", "1"],
        None,
    );
    // Two uploads of 4 MiB announced, 1 KiB of each sent, and no more: the
    // first holds the one slot while serve waits for its body; the second
    // is refused from its headers.
    let unfinished = |id: &str| {
        let mut client = TcpStream::connect(front.address()).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            client,
            "{}",
            raw_head(KEY, 4 << 20, &format!("x-request-id: {id}\r\n"))
        )
        .unwrap();
        client.write_all(&[b' '; 1024]).unwrap();
        client
    };
    let holding = unfinished("holding");
    std::thread::sleep(Duration::from_millis(300));
    let mut beyond = unfinished("beyond");
    let mut answer = Vec::new();
    beyond
        .read_to_end(&mut answer)
        .expect("serve answered before the body");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.to_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("--max-in-flight"), "{answer}");
    drop(holding);
    let records = front.stop();
    let refused = records
        .iter()
        .find(|record| record["id"] == "beyond")
        .expect("the refusal is recorded");
    assert_eq!(refused["status"], "rate_limited", "{refused}");
    assert_eq!(refused["reason"], "admission:total", "{refused}");
}

#[test]
fn a_client_that_leaves_during_its_upload_leaves_one_record_and_no_call() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-upload-left", &[], None);
    let mut client = TcpStream::connect(front.address()).unwrap();
    write!(
        client,
        "{}",
        raw_head(KEY, 64 << 10, "x-request-id: left-mid-upload\r\n")
    )
    .unwrap();
    client.write_all(&[b' '; 1024]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(client);
    std::thread::sleep(Duration::from_millis(300));
    let records = front.stop();
    assert!(upstream.requests().is_empty(), "no route was called");
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["id"], "left-mid-upload");
    assert_eq!(records[0]["status"], "error", "{}", records[0]);
    assert_eq!(
        records[0]["finish_reason"], "client_disconnected",
        "{}",
        records[0]
    );
}

#[test]
fn every_response_carries_the_request_id_which_the_record_and_the_upstream_share() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-ids", &[], None);
    let given = post(&front, KEY, &chat(false), &["x-request-id: trace-42.a"]);
    assert_eq!(
        header(&given, "x-request-id").as_deref(),
        Some("trace-42.a")
    );
    let own = post(&front, KEY, &chat(false), &[]);
    let own_id = header(&own, "x-request-id").unwrap();
    assert!(own_id.starts_with("serve-"), "{own_id}");
    let unusable = post(&front, KEY, &chat(false), &["x-request-id: two words"]);
    let replaced = header(&unusable, "x-request-id").unwrap();
    assert!(replaced.starts_with("serve-"), "{replaced}");
    let refused = post(
        &front,
        "sk-not-a-key",
        &chat(false),
        &["x-request-id: refused-1"],
    );
    assert_eq!(
        header(&refused, "x-request-id").as_deref(),
        Some("refused-1")
    );
    let forwarded: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    assert!(forwarded["model"].as_str().unwrap().starts_with("sim-"));
    let upstream_ids: Vec<Option<String>> = upstream
        .requests()
        .iter()
        .map(|request| request.header("x-request-id"))
        .collect();
    assert_eq!(
        upstream_ids,
        [
            Some("trace-42.a".to_owned()),
            Some(own_id.clone()),
            Some(replaced.clone())
        ]
    );
    let mut ids: Vec<String> = front
        .stop()
        .into_iter()
        .map(|record| record["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    let mut expected = vec![
        "trace-42.a".to_owned(),
        own_id,
        replaced,
        "refused-1".to_owned(),
    ];
    expected.sort();
    assert_eq!(ids, expected);
}

/// Every endpoint the router serves, read from serve's own list so that a
/// new one is tried here the day it is added: the keyed ones answer 401
/// without a key or with a wrong one, the public ones answer without, and
/// a path serve does not serve answers 404.
#[test]
fn every_endpoint_serve_lists_as_keyed_needs_a_key_and_only_the_public_ones_answer_without() {
    use routeval::serve::{Access, Endpoint};
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-keyed-paths", &[], None);
    let keyed = format!("Authorization: Bearer {KEY}");
    let wrong = "Authorization: Bearer not-a-key";
    let (mut refused_decisions, mut publics) = (0, 0);
    for endpoint in Endpoint::ALL {
        let path = endpoint.path().replace("{id}", "support-assistant");
        let method = endpoint.method();
        let mut request = vec!["-X", method];
        if method == "POST" {
            request.extend(["-d", "{}"]);
        }
        match endpoint.access() {
            Access::Keyed => {
                for key in [None, Some(wrong)] {
                    let mut flags = request.clone();
                    flags.extend(key.into_iter().flat_map(|header| ["-H", header]));
                    let answer = curl(&front, &path, &flags);
                    assert_eq!(status_of(&answer), 401, "{path} {flags:?}: {answer}");
                    assert_eq!(
                        body_of(&answer)["error"]["type"],
                        "invalid_request_error",
                        "{answer}"
                    );
                    refused_decisions += usize::from(endpoint.decides());
                }
            }
            Access::Public => {
                let answer = curl(&front, &path, &request);
                assert_eq!(status_of(&answer), 200, "{path}: {answer}");
                publics += 1;
            }
        }
    }
    assert_eq!(
        publics, 3,
        "the probes and /metrics are the public endpoints"
    );
    let listed = curl(&front, "/v1/models", &["-H", &keyed]);
    assert_eq!(status_of(&listed), 200, "{listed}");
    for unserved in ["/v1/embeddings", "/v1/chat/completions/extra", "/"] {
        let answer = curl(&front, unserved, &["-X", "POST", "-d", "{}"]);
        assert_eq!(status_of(&answer), 404, "{unserved}: {answer}");
        assert_eq!(body_of(&answer)["error"]["type"], "invalid_request_error");
    }
    // The refused decisions are records; the refused listings are not.
    let records = front.stop();
    assert_eq!(records.len(), refused_decisions, "{records:?}");
    assert_eq!(refused_decisions, 4);
    assert!(
        records
            .iter()
            .all(|record| record["reason"] == "unauthorized"),
        "{records:?}"
    );
}

#[test]
fn models_answer_as_the_openai_api_does_and_other_endpoints_get_an_openai_404() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-models", &[], None);
    let keyed = format!("Authorization: Bearer {KEY}");
    let listed = body_of(&curl(&front, "/v1/models", &["-H", &keyed]));
    assert!(listed["data"][0]["created"].as_i64().unwrap() > 1_700_000_000);
    let one = curl(&front, "/v1/models/support-assistant", &["-H", &keyed]);
    assert_eq!(status_of(&one), 200);
    assert_eq!(body_of(&one)["id"], "support-assistant");
    let other = curl(&front, "/v1/models/gpt-4o", &["-H", &keyed]);
    assert_eq!(status_of(&other), 404);
    assert_eq!(body_of(&other)["error"]["param"], "model");
    for (path, method) in [
        ("/v1/completions", "POST"),
        ("/v1/embeddings", "POST"),
        ("/v1/responses", "POST"),
    ] {
        let answer = curl(&front, path, &["-X", method, "-d", "{}"]);
        assert_eq!(status_of(&answer), 404, "{path}: {answer}");
        let message = body_of(&answer)["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains(path) && message.contains("POST /v1/chat/completions"),
            "{message}"
        );
    }
}

#[test]
fn connections_that_never_finish_a_request_cannot_starve_a_real_one() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    // 256 descriptors: before the bound, 300 idle connections left serve
    // unable to accept any other.
    let front = Front::start(
        &upstream.base_url(),
        "hostile-slowloris",
        &["--header-read-timeout-ms", "1500"],
        Some(256),
    );
    let hostile: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut stream = TcpStream::connect(front.address()).unwrap();
            let _ = stream.write_all(b"P");
            stream
        })
        .collect();
    let answer = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&answer), 200, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    for mut stream in hostile {
        stream
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        let mut buffer = [0; 64];
        // Closed: the end of the stream (after a 408, maybe), or a reset.
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) => {
                    assert!(
                        !matches!(
                            error.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ),
                        "a connection that never sent a request head was kept open"
                    );
                    break;
                }
            }
        }
    }
}

#[test]
fn a_connection_left_idle_is_closed() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(
        &upstream.base_url(),
        "hostile-idle",
        &["--idle-timeout-ms", "500"],
        None,
    );
    let mut client = TcpStream::connect(front.address()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: serve\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0; 1024];
    let started = Instant::now();
    loop {
        match client.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
            Err(error) => panic!("the idle connection was kept: {error}"),
        }
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() >= Duration::from_millis(400));
}

#[test]
fn refusals_without_a_key_are_counted_but_not_all_journaled() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-flood", &[], None);
    let started = Instant::now();
    let body = "{}";
    for _ in 0..400 {
        let mut client = TcpStream::connect(front.address()).unwrap();
        write!(
            client,
            "{}{body}",
            raw_head("sk-not-a-key", body.len(), "Connection: close\r\n")
        )
        .unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    let seconds = started.elapsed().as_secs_f64().ceil();
    let metrics = curl(&front, "/metrics", &[]);
    let unrecorded: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("routeval_unrecorded_refusals_total "))
        .unwrap()
        .parse()
        .unwrap();
    let records = front.stop();
    assert_eq!(records.len() as u64 + unrecorded, 400);
    assert!(
        (records.len() as f64) <= 20.0 * (seconds + 1.0),
        "{} refusals journaled in {seconds} s",
        records.len()
    );
}

#[test]
fn a_leaked_key_revoked_by_sighup_is_refused_at_once_and_a_bad_keys_file_keeps_the_old_keys() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-keys", &[], None);
    let keys = front._directory.path().join("keys.toml");
    assert_eq!(status_of(&post(&front, KEY, &chat(false), &[])), 200);
    let rotated = "sk-rotated-after-a-leak";
    let digest = routeval::digest::sha256_hex(rotated.as_bytes());
    std::fs::write(
        &keys,
        format!("[[keys]]\nsha256 = \"{digest}\"\ntenant = \"demo\"\n"),
    )
    .unwrap();
    front.served.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    while status_of(&post(&front, KEY, &chat(false), &[])) != 401 {
        assert!(Instant::now() < until, "the revoked key is still accepted");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status_of(&post(&front, rotated, &chat(false), &[])), 200);
    std::fs::write(&keys, "[[keys]]\nsha256 = \"not a digest\"\n").unwrap();
    front.served.signal("HUP");
    let until = Instant::now() + Duration::from_secs(5);
    while !curl(&front, "/metrics", &[])
        .contains("routeval_keys_reloads_total{outcome=\"refused\"}")
    {
        assert!(Instant::now() < until, "the bad keys file was not refused");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status_of(&post(&front, rotated, &chat(false), &[])), 200);
    assert_eq!(status_of(&post(&front, KEY, &chat(false), &[])), 401);
    let log = front.served.stop_with_log();
    let refused = log_events(&log, "keys_reload_refused");
    assert!(
        !refused.is_empty()
            && refused[0]["message"]
                .as_str()
                .unwrap()
                .contains("the running keys stay"),
        "{log}"
    );
    assert!(
        !log.contains(rotated) && !log.contains(KEY),
        "a key in the log: {log}"
    );
}

#[test]
fn a_key_rotated_to_one_of_the_same_length_with_its_time_restored_is_seen_without_a_signal() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let front = Front::start(&upstream.base_url(), "hostile-keys-same", &[], None);
    let keys = front._directory.path().join("keys.toml");
    assert_eq!(status_of(&post(&front, KEY, &chat(false), &[])), 200);
    let before = std::fs::read_to_string(&keys).unwrap();
    let modified = std::fs::metadata(&keys).unwrap().modified().unwrap();
    // The leaked key's digest replaced by another of the same length, and
    // the file's time put back, as a config-management tool does.
    let rotated = "sk-serve-test-ROTATED012";
    assert_eq!(rotated.len(), KEY.len());
    let after = before.replace(
        &routeval::digest::sha256_hex(KEY.as_bytes()),
        &routeval::digest::sha256_hex(rotated.as_bytes()),
    );
    assert_eq!(after.len(), before.len());
    std::fs::write(&keys, after).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&keys)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while status_of(&post(&front, KEY, &chat(false), &[])) != 401 {
        assert!(Instant::now() < until, "the revoked key is still accepted");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status_of(&post(&front, rotated, &chat(false), &[])), 200);
    front.stop();
}

/// A config for `base_url` signed on 2020-01-01 for a day: long expired.
fn expired_config(base_url: &str) -> PathBuf {
    expired_config_at(base_url, "2020-01-01T00:00:00Z", "hostile-expired")
}

/// The demo's predictive table signed `at` for one day, into `name/`.
fn expired_config_at(base_url: &str, at: &str, name: &str) -> PathBuf {
    let pipeline = Pipeline::shared();
    let text =
        std::fs::read_to_string(crate::common::repo().join("datasets/demo/routes/predictive.toml"))
            .unwrap()
            .replace("http://127.0.0.1:8089/v1", base_url);
    let table = pipeline.path(&format!("{name}.toml"));
    std::fs::write(&table, text).unwrap();
    let out = pipeline.path(name);
    crate::common::gate_single(pipeline, &table, &out, None, true)
        .args(["--at", at, "--ttl-days", "1"])
        .assert()
        .success();
    out.join("route-config.v1.json")
}

#[test]
fn a_restart_on_an_expired_config_follows_the_expired_flag() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    let config = expired_config(&upstream.base_url());
    let (mut refused, _directory) = Front::command(&config, &[]);
    let output = refused.output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expired at 2020-01-02"), "{stderr}");
    let front = Front::serving(&config, &["--expired", "start"], None);
    let ready = curl(&front, "/readyz", &[]);
    assert_eq!(status_of(&ready), 200, "{ready}");
    assert!(
        ready.contains("alarm: the signed config expired at 2020-01-02"),
        "{ready}"
    );
    assert_eq!(status_of(&post(&front, KEY, &chat(false), &[])), 200);
    let log = front.served.stop_with_log();
    let expired = log_events(&log, "config_expired");
    assert_eq!(expired.len(), 1, "{log}");
    assert_eq!(expired[0]["expires_at"], "2020-01-02T00:00:00Z", "{log}");
    assert_eq!(expired[0]["level"], "warn", "{log}");
    let strict = Front::serving(&config, &["--expired", "start", "--strict-expiry"], None);
    assert_eq!(status_of(&post(&strict, KEY, &chat(false), &[])), 503);
}

#[test]
fn a_restart_just_after_expiry_starts_within_the_grace_and_is_refused_after_it() {
    let upstream = ScriptedUpstream::start(answering(completion("hi")));
    // Signed 25 hours ago for one day: it expired an hour ago.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let at = routeval::clock::format_rfc3339(now - 25 * 3600);
    let config = expired_config_at(&upstream.base_url(), &at, "hostile-just-expired");
    let refused_with = |config: &Path, grace: &str| {
        let (mut command, _directory) = Front::command(config, &["--expired-grace-s", grace]);
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // Half an hour of grace: an hour past expiry is refused, naming both.
    let stderr = refused_with(&config, "1800");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("more than --expired-grace-s 1800 ago") && stderr.contains("expired at"),
        "{stderr}"
    );
    // Two hours: the restart serves it, not ready, and says why.
    let front = Front::serving(&config, &["--expired-grace-s", "7200"], None);
    let ready = curl(&front, "/readyz", &[]);
    assert_eq!(status_of(&ready), 200, "{ready}");
    assert!(
        ready.contains("alarm: the signed config expired at"),
        "{ready}"
    );
    assert_eq!(status_of(&post(&front, KEY, &chat(false), &[])), 200);
    let log = front.served.stop_with_log();
    let expired = log_events(&log, "config_expired");
    assert_eq!(expired.len(), 1, "{log}");
    assert!(
        expired[0]["message"]
            .as_str()
            .unwrap()
            .contains("within --expired-grace-s 7200 of its expiry"),
        "{log}"
    );
    // Years past expiry, the same grace refuses.
    let long_ago = expired_config_at(
        &upstream.base_url(),
        "2020-01-01T00:00:00Z",
        "hostile-expired-long-ago",
    );
    let stderr = refused_with(&long_ago, "7200");
    assert!(
        stderr.contains("more than --expired-grace-s 7200 ago"),
        "{stderr}"
    );
}

/// A route that sends SSE comments (`: PROCESSING`, as OpenRouter does
/// while a request waits) every 100 ms for `comments` times, then its
/// answer; the fallback (`sim-small`) answers at once.
fn processing_then_answering(comments: usize) -> ScriptedUpstream {
    ScriptedUpstream::start(move |received: &Received| {
        if let Some(fallback) = fallback_answer(received) {
            return fallback;
        }
        let head = sse_head();
        let mut steps = vec![Step::Send(head)];
        for _ in 0..comments {
            steps.push(Step::Send(b": PROCESSING\n\n".to_vec()));
            steps.push(Step::Pause(Duration::from_millis(100)));
        }
        let mut answer = sse_chunk("from the primary", Some("stop"));
        answer.extend(b"data: [DONE]\n\n");
        steps.push(Step::Send(answer));
        steps
    })
}

#[test]
fn sse_comments_keep_the_connection_and_not_the_first_token_deadline() {
    // Comments for 2 s against a 500 ms first-token deadline: the request
    // moves to the fallback, as a route that said nothing would.
    let waiting = processing_then_answering(20);
    let table = falling_back(&waiting.base_url(), &waiting.base_url(), "", 20_000);
    let config = signed_table(Pipeline::shared(), "hostile-processing", &table);
    let front = Front::serving(&config, &["--first-token-timeout-ms", "500"], None);
    let answer = post(&front, KEY, &chat(true), &["-N"]);
    assert!(answer.contains("from the fallback"), "{answer}");
    assert!(!answer.contains("from the primary"), "{answer}");
    let mut records = front.stop();
    records.sort_by_key(|record| record["id"].as_str().unwrap().len());
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["route"], "backup");
    assert_eq!(records[0]["reason"], "fallback:deadline");
    assert_eq!(records[1]["route"], "large");
    assert_eq!(records[1]["reason"], "abandoned:deadline");

    // Comments for 300 ms, then the answer, within the deadline: answered
    // by the primary, its first token at the answer, not the comment.
    let slow = processing_then_answering(3);
    let table = falling_back(&slow.base_url(), &slow.base_url(), "", 20_000);
    let config = signed_table(Pipeline::shared(), "hostile-processing-late", &table);
    let front = Front::serving(&config, &["--first-token-timeout-ms", "2000"], None);
    let answer = post(&front, KEY, &chat(true), &["-N"]);
    assert!(answer.contains("from the primary"), "{answer}");
    let records_directory = front.records.clone();
    front.served.stop();
    let rows = served_records(&records_directory, &["route", "reason", "ttft_ms"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["route"], "large");
    let ttft = rows[0]["ttft_ms"].as_f64().unwrap();
    assert!(
        ttft >= 300.0,
        "the first token was taken at a comment: {ttft} ms"
    );
}

/// A route whose stream is `head` then `events`, as given; the fallback
/// (`sim-small`) answers at once.
fn streaming(content_type: &'static str, events: Vec<u8>) -> ScriptedUpstream {
    ScriptedUpstream::start(move |received: &Received| {
        if let Some(fallback) = fallback_answer(received) {
            return fallback;
        }
        let mut head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n")
                .into_bytes();
        head.extend(&events);
        vec![Step::Send(head)]
    })
}

/// vLLM's and LiteLLM's event when generation fails mid-stream.
const ERROR_EVENT: &[u8] =
    b"data: {\"error\": {\"message\": \"generation failed\", \"type\": \"server_error\"}}\n\n";

#[test]
fn an_error_event_mid_stream_is_an_upstream_error_for_every_client_and_in_every_record() {
    let mut events = sse_chunk("Hel", None);
    events.extend(ERROR_EVENT);
    events.extend(b"data: [DONE]\n\n");
    let upstream = streaming("text/event-stream", events);
    let front = Front::start(&upstream.base_url(), "hostile-error-event", &[], None);
    let streamed = post(&front, KEY, &chat(true), &["-N"]);
    assert_eq!(status_of(&streamed), 200, "{streamed}");
    assert!(streamed.contains("generation failed"), "{streamed}");
    let whole = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&whole), 502, "{whole}");
    assert_eq!(
        body_of(&whole)["error"]["type"],
        "upstream_error",
        "{whole}"
    );
    let records = front.stop();
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(record["status"], "error", "{record}");
        assert_eq!(record["finish_reason"], "upstream_error", "{record}");
    }
}

#[test]
fn an_error_event_before_the_first_token_moves_the_request_to_its_fallback() {
    let mut events = b": PROCESSING\n\n".to_vec();
    events.extend(ERROR_EVENT);
    let upstream = streaming("text/event-stream", events);
    let table = falling_back(&upstream.base_url(), &upstream.base_url(), "", 20_000);
    let config = signed_table(Pipeline::shared(), "hostile-error-first", &table);
    let front = Front::serving(&config, &[], None);
    for stream in [true, false] {
        let answer = post(&front, KEY, &chat(stream), &["-N"]);
        assert_eq!(status_of(&answer), 200, "{answer}");
        assert!(answer.contains("from the fallback"), "{answer}");
    }
    let records = front.stop();
    let own: Vec<&Value> = records
        .iter()
        .filter(|record| record["route"] == "backup")
        .collect();
    assert_eq!(own.len(), 2, "{records:?}");
    assert!(
        own.iter()
            .all(|record| record["reason"] == "fallback:error")
    );
    assert!(own.iter().all(|record| record["status"] == "ok"));
}

#[test]
fn a_stream_closed_with_one_of_two_choices_unfinished_is_cut_for_the_streaming_client() {
    let chunk = |index: u64, content: &str, finish: Option<&str>| {
        let event = json!({
            "id": "chatcmpl-two",
            "object": "chat.completion.chunk",
            "model": "scripted-model",
            "choices": [{"index": index, "delta": {"content": content}, "finish_reason": finish}],
        });
        format!("data: {event}\n\n").into_bytes()
    };
    let mut events = chunk(0, "One", None);
    events.extend(chunk(1, "Tw", None));
    events.extend(chunk(0, ".", Some("stop")));
    // Closed here: choice 1 never finished, and no [DONE].
    let upstream = streaming("text/event-stream", events);
    let front = Front::start(&upstream.base_url(), "hostile-two-choices", &[], None);
    let mut body = chat(true);
    body["n"] = json!(2);
    let streamed = post(&front, KEY, &body, &["-N"]);
    assert!(streamed.contains("\"error\""), "no error event: {streamed}");
    let records = front.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "error");
    assert_eq!(records[0]["finish_reason"], "upstream_cut");
}

#[test]
fn media_types_are_case_insensitive_and_an_answer_serve_cannot_read_is_an_error() {
    let mut events = sse_chunk("Hello", Some("stop"));
    events.extend(b"data: [DONE]\n\n");
    let upstream = streaming("Text/Event-Stream; charset=utf-8", events);
    let front = Front::start(&upstream.base_url(), "hostile-media-case", &[], None);
    let whole = post(&front, KEY, &chat(false), &[]);
    assert_eq!(status_of(&whole), 200, "{whole}");
    assert_eq!(content_of(&whole), "Hello", "{whole}");
    let records = front.stop();
    assert_eq!(records[0]["status"], "ok", "{records:?}");

    let upstream = streaming("text/plain", b"this is not a chat completion".to_vec());
    let front = Front::start(&upstream.base_url(), "hostile-unreadable", &[], None);
    let _ = post(&front, KEY, &chat(false), &[]);
    let records = front.stop();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["status"], "error", "{records:?}");
    assert_eq!(records[0]["finish_reason"], "upstream_malformed");
}
