//! What a chat client reads on the wire from `routeval serve`, checked
//! with the clients themselves: OpenAI's error codes (`invalid_api_key`,
//! `model_not_found`) and a JSON 405 read by the official `openai` SDK; a
//! route whose own key the upstream refuses answered as a 502 naming the
//! route, not as the client's 401; an open breaker's `Retry-After` that
//! the SDK's retry waits out to the half-open probe; and browser origins
//! allowed by `--cors-origin`, enforced by a real Chromium.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::common::browser::{chromium, headless, reported};
use crate::common::{
    KEY, Pipeline, Received, ScriptedUpstream, Served, Step, answers_hello, header_of, log_events,
    one_route, proxy_python, response, run_python_with, served_records, signed_table, status_of,
    write_keys,
};

/// serve of the one-route table `name` on `upstream` with `flags`, and the
/// directory holding its records.
fn serve_one_route(
    name: &str,
    upstream: &ScriptedUpstream,
    breaker: &str,
    flags: &[&str],
) -> (Served, tempfile::TempDir) {
    let pipeline = Pipeline::shared();
    let config = signed_table(pipeline, name, &one_route(&upstream.base_url(), breaker));
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let mut command = pipeline.serve_demo(&config, &keys, &directory.path().join("records"));
    (Served::start(command.args(flags)), directory)
}

const SDK_REFUSALS: &str = r#"
import json, sys
import httpx, openai

base, key = sys.argv[1], sys.argv[2]
ask = dict(model="support-assistant", messages=[{"role": "user", "content": "Hi"}])
out = {}
try:
    openai.OpenAI(base_url=base, api_key="sk-not-a-key", max_retries=0).chat.completions.create(**ask)
except openai.AuthenticationError as error:
    out["unauthorized"] = [error.status_code, error.code, error.type]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
try:
    client.chat.completions.create(**{**ask, "model": "gpt-nope"})
except openai.NotFoundError as error:
    out["unknown model"] = [error.status_code, error.code, error.param]
try:
    client.models.retrieve("gpt-nope")
except openai.NotFoundError as error:
    out["unknown model id"] = [error.status_code, error.code]
try:
    client.get("/chat/completions", cast_to=httpx.Response)
except openai.APIStatusError as error:
    out["wrong method"] = [error.status_code, error.type, error.message,
                           error.response.headers.get("allow")]
print(json.dumps(out))
"#;

#[test]
fn the_openai_sdk_reads_openais_codes_and_a_wrong_method_is_a_json_405() {
    let Some(python) = proxy_python("the OpenAI SDK against serve") else {
        return;
    };
    let upstream = ScriptedUpstream::start(answers_hello);
    let (served, _records) = serve_one_route("wire-codes", &upstream, "", &[]);
    let output = run_python_with(&python, SDK_REFUSALS, &[&served.url("/v1"), KEY]);
    served.stop();
    let read: Value = serde_json::from_str(&output).unwrap();
    assert_eq!(
        read["unauthorized"],
        json!([401, "invalid_api_key", "invalid_request_error"])
    );
    assert_eq!(
        read["unknown model"],
        json!([404, "model_not_found", "model"])
    );
    assert_eq!(read["unknown model id"], json!([404, "model_not_found"]));
    let wrong = &read["wrong method"];
    assert_eq!(wrong[0], 405, "{wrong}");
    assert_eq!(wrong[1], "invalid_request_error", "{wrong}");
    assert!(
        wrong[2]
            .as_str()
            .unwrap()
            .contains("GET /v1/chat/completions is not allowed; /v1/chat/completions answers POST"),
        "{wrong}"
    );
    assert_eq!(wrong[3], "POST", "{wrong}");
    assert!(upstream.requests().is_empty(), "no refusal called a route");
}

const SDK_ROUTE_KEY_REFUSED: &str = r#"
import json, sys
import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
try:
    client.chat.completions.create(model="support-assistant",
                                   messages=[{"role": "user", "content": "Hi"}],
                                   extra_headers={"x-request-id": "route-key-refused"})
    print(json.dumps({"answered": True}))
except openai.APIStatusError as error:
    print(json.dumps({"raised": type(error).__name__, "status": error.status_code,
                      "message": error.message}))
"#;

#[test]
fn a_route_key_its_upstream_refuses_is_a_502_naming_the_route_not_the_clients_401() {
    let Some(python) = proxy_python("the OpenAI SDK against serve") else {
        return;
    };
    let refused = br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    let upstream = ScriptedUpstream::start(move |_: &Received| {
        vec![Step::Send(response(
            "401 Unauthorized",
            &[],
            "application/json",
            refused,
        ))]
    });
    let (served, directory) = serve_one_route("wire-route-key", &upstream, "", &[]);
    let output = run_python_with(&python, SDK_ROUTE_KEY_REFUSED, &[&served.url("/v1"), KEY]);
    let log = served.stop_with_log();
    let read: Value = serde_json::from_str(&output).unwrap();
    // The client's key was good: the SDK must not raise AuthenticationError
    // and send its user to fix a key that is not theirs.
    assert_eq!(read["raised"], "InternalServerError", "{read}");
    assert_eq!(read["status"], 502, "{read}");
    let message = read["message"].as_str().unwrap();
    assert!(
        message.contains("route \"large\" refused serve's credentials"),
        "{message}"
    );
    let logged = log_events(&log, "upstream_credentials_refused");
    assert_eq!(logged.len(), 1, "{log}");
    assert_eq!(logged[0]["level"], "error", "{log}");
    assert_eq!(logged[0]["route"], "large", "{log}");
    assert_eq!(logged[0]["upstream_status"], 401, "{log}");
    let records = served_records(
        &directory.path().join("records"),
        &["id", "reason", "status"],
    );
    assert_eq!(
        records,
        vec![
            json!({"id": "route-key-refused", "reason": "upstream-credentials", "status": "error"})
        ]
    );
}

const SDK_BREAKER: &str = r#"
import json, sys, time
import openai

base, key = sys.argv[1], sys.argv[2]
ask = dict(model="support-assistant", messages=[{"role": "user", "content": "Hi"}])
once = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
out = {}
try:
    once.chat.completions.create(**ask)
except openai.APIStatusError as error:
    out["failed"] = error.status_code
try:
    once.chat.completions.create(**ask)
except openai.APIStatusError as error:
    out["open"] = [error.status_code, error.response.headers.get("retry-after"),
                   float(error.response.headers.get("retry-after-ms"))]
started = time.monotonic()
retrying = openai.OpenAI(base_url=base, api_key=key, max_retries=1)
answer = retrying.chat.completions.create(**ask)
out["retried"] = [answer.choices[0].message.content, time.monotonic() - started]
print(json.dumps(out))
"#;

#[test]
fn an_open_breakers_retry_after_is_its_probe_time_and_the_sdks_one_retry_lands_on_it() {
    let Some(python) = proxy_python("the OpenAI SDK against serve") else {
        return;
    };
    // The route fails once, then answers; its breaker opens at that one
    // failure for 2.5 s, and there is no fallback.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let upstream = ScriptedUpstream::start(move |request: &Received| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            let failed = br#"{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}"#;
            return vec![Step::Send(response(
                "500 Internal Server Error",
                &[],
                "application/json",
                failed,
            ))];
        }
        answers_hello(request)
    });
    let breaker =
        "\n[routes.breaker]\nfirst_token_deadline_ms = 5000.0\nopen_after = 1\nopen_ms = 2500.0\n";
    let (served, directory) = serve_one_route("wire-breaker", &upstream, breaker, &[]);
    let output = run_python_with(&python, SDK_BREAKER, &[&served.url("/v1"), KEY]);
    served.stop();
    let read: Value = serde_json::from_str(&output).unwrap();
    assert_eq!(read["failed"], 500, "{read}");
    let open = &read["open"];
    assert_eq!(open[0], 503, "{read}");
    // Said in whole seconds and in milliseconds: what is left of 2.5 s.
    let left_ms = open[2].as_f64().unwrap();
    assert!(left_ms > 1000.0 && left_ms <= 2500.0, "{read}");
    assert_eq!(
        open[1].as_str().unwrap(),
        ((left_ms / 1000.0).ceil() as u64).to_string(),
        "{read}"
    );
    // One retry, after the time it was told, reaches the probe: with a
    // second's Retry-After it would have been spent while the breaker was
    // still open.
    assert_eq!(read["retried"][0], "Hello", "{read}");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the failure and the probe");
    let records = served_records(&directory.path().join("records"), &["reason", "status"]);
    let reasons: Vec<&Value> = records.iter().map(|record| &record["reason"]).collect();
    assert_eq!(
        reasons
            .iter()
            .filter(|reason| **reason == "breaker-open")
            .count(),
        2,
        "{records:?}"
    );
}

/// A page that calls serve's chat endpoint from its own origin, as a
/// browser app with the OpenAI API's shape would, and writes what it got
/// into `<pre id="measure">`.
fn calling_page(serve_url: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>
const out = {{}};
fetch("{serve_url}/v1/chat/completions", {{
  method: "POST",
  headers: {{"Authorization": "Bearer {KEY}", "Content-Type": "application/json"}},
  body: JSON.stringify({{model: "support-assistant", messages: [{{role: "user", content: "Hi"}}]}}),
}}).then(async (answer) => {{
  out.status = answer.status;
  out.route = answer.headers.get("x-routeval-route");
  out.request_id = answer.headers.get("x-request-id") !== null;
  out.content = (await answer.json()).choices[0].message.content;
}}).catch((failure) => {{ out.failed = String(failure); }}).finally(() => {{
  const pre = document.createElement("pre");
  pre.id = "measure";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}});
</script></body></html>"#
    )
}

/// What the page at `url` reported, loaded in headless Chromium.
fn page_report(chromium: &std::path::Path, profile: &std::path::Path, url: &str) -> Value {
    let output = headless(chromium, profile, 800, 600)
        .args(["--virtual-time-budget=10000", "--dump-dom"])
        .arg(url)
        .output()
        .unwrap();
    reported(&output)
}

#[test]
fn chromium_calls_serve_from_an_allowed_origin_and_is_refused_from_any_other() {
    let Some(chromium) = chromium() else {
        return;
    };
    let upstream = ScriptedUpstream::start(answers_hello);
    // The page's server: its origin is http://127.0.0.1:PORT, which serve
    // allows, or http://localhost:PORT, which it does not.
    let page = Arc::new(std::sync::OnceLock::<String>::new());
    let served_page = page.clone();
    let pages = ScriptedUpstream::start(move |_: &Received| {
        let html = served_page.get().cloned().unwrap_or_default();
        vec![Step::Send(response(
            "200 OK",
            &[],
            "text/html",
            html.as_bytes(),
        ))]
    });
    let allowed = format!("http://127.0.0.1:{}", pages.port);
    let (served, directory) =
        serve_one_route("wire-cors", &upstream, "", &["--cors-origin", &allowed]);
    page.set(calling_page(&served.url(""))).unwrap();
    let profiles = tempfile::tempdir().unwrap();
    let from_allowed = page_report(
        &chromium,
        &profiles.path().join("allowed"),
        &format!("{allowed}/app.html"),
    );
    let from_other = page_report(
        &chromium,
        &profiles.path().join("other"),
        &format!("http://localhost:{}/app.html", pages.port),
    );
    // A preflight from a listed origin is answered without a key; one from
    // any other is refused, and without the flag serve sends no CORS
    // header at all.
    let preflight = |origin: &str| {
        let output = std::process::Command::new("curl")
            .args(["-s", "-i", "-X", "OPTIONS"])
            .args(["-H", &format!("Origin: {origin}")])
            .args(["-H", "Access-Control-Request-Method: POST"])
            .args([
                "-H",
                "Access-Control-Request-Headers: authorization, content-type",
            ])
            .arg(served.url("/v1/chat/completions"))
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    let (listed, unlisted) = (preflight(&allowed), preflight("https://evil.example"));
    served.stop();
    assert_eq!(
        from_allowed,
        json!({"status": 200, "route": "large", "request_id": true, "content": "Hello"})
    );
    assert!(
        from_other["failed"]
            .as_str()
            .is_some_and(|failed| failed.contains("Failed to fetch")),
        "{from_other}"
    );
    assert_eq!(status_of(&listed), 204, "{listed}");
    assert_eq!(header_of(&listed, "access-control-allow-origin"), allowed);
    assert_eq!(header_of(&listed, "access-control-allow-methods"), "POST");
    assert_eq!(
        header_of(&listed, "access-control-allow-headers"),
        "authorization, content-type"
    );
    assert_eq!(status_of(&unlisted), 403, "{unlisted}");
    assert!(
        !unlisted
            .to_ascii_lowercase()
            .contains("access-control-allow-origin")
    );
    // Only the allowed page's request reached the route.
    assert_eq!(upstream.requests().len(), 1);
    let records = served_records(&directory.path().join("records"), &["status"]);
    assert_eq!(records.len(), 1, "{records:?}");

    let (plain, _records) = serve_one_route("wire-no-cors", &upstream, "", &[]);
    let output = std::process::Command::new("curl")
        .args(["-s", "-i", "-X", "OPTIONS"])
        .args(["-H", &format!("Origin: {allowed}")])
        .args(["-H", "Access-Control-Request-Method: POST"])
        .arg(plain.url("/v1/chat/completions"))
        .output()
        .unwrap();
    plain.stop();
    let answer = String::from_utf8(output.stdout).unwrap();
    assert!(
        !answer.to_ascii_lowercase().contains("access-control-"),
        "{answer}"
    );
}
