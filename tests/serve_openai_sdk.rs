//! `routeval serve` read by the official `openai` Python SDK, in front of an
//! upstream that streams as the OpenAI API does (text, tool calls, `n > 1`,
//! structured output, logprobs, usage in the last chunk): serve calls the
//! upstream with streaming whatever the client asked, and what a client
//! that did not stream gets is the completion the SDK parses, field by
//! field. And a long answer that is healthy is never taken for a dead
//! route: its first token comes at once, however long it generates.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    KEY, Pipeline, Received, ScriptedUpstream, Step, falling_back, gate_single, proxy_python,
    response, run_python_with, served_records, signed_single, sse_head, start_serve, write_keys,
};

/// One `chat.completion.chunk` event of the scripted model.
fn event(choices: Value, usage: Option<Value>) -> Vec<u8> {
    let mut chunk = json!({
        "id": "chatcmpl-sdk",
        "object": "chat.completion.chunk",
        "created": 1_764_000_000,
        "model": "sim-large-2026-11-01",
        "system_fingerprint": "fp_sdk",
        "choices": choices,
    });
    if let Some(usage) = usage {
        chunk["usage"] = usage;
    }
    format!("data: {chunk}\n\n").into_bytes()
}

/// The events the scripted model streams for `body`.
fn streamed_events(body: &Value) -> Vec<Vec<u8>> {
    let n = body["n"].as_u64().unwrap_or(1);
    let mut events: Vec<Vec<u8>> = (0..n)
        .map(|index| {
            event(
                json!([{"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
                None,
            )
        })
        .collect();
    if body.get("tools").is_some() {
        for call in [
            json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}),
            json!({"index": 0, "function": {"arguments": "{\"city\":"}}),
            json!({"index": 0, "function": {"arguments": "\"Oslo\"}"}}),
        ] {
            events.push(event(
                json!([{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]),
                None,
            ));
        }
        events.push(event(
            json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
            None,
        ));
    } else {
        let text = |index: u64| {
            if body.get("response_format").is_some() {
                r#"{"answer": "5 days"}"#.to_owned()
            } else if n > 1 {
                format!("answer number {index}")
            } else {
                "Hello there, friend".to_owned()
            }
        };
        let logprobs = body["logprobs"] == true;
        for piece in 0..3 {
            for index in 0..n {
                let whole = text(index);
                let third = whole.len().div_ceil(3);
                let part: String = whole.chars().skip(piece * third).take(third).collect();
                let mut choice =
                    json!({"index": index, "delta": {"content": part}, "finish_reason": null});
                if logprobs {
                    choice["logprobs"] = json!({"content": [{"token": part, "logprob": -0.25, "bytes": part.as_bytes(), "top_logprobs": []}], "refusal": null});
                }
                events.push(event(json!([choice]), None));
            }
        }
        for index in 0..n {
            events.push(event(
                json!([{"index": index, "delta": {}, "finish_reason": "stop"}]),
                None,
            ));
        }
    }
    if body["stream_options"]["include_usage"] == true {
        events.push(event(
            json!([]),
            Some(json!({"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19})),
        ));
    }
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

/// A model that streams when asked, with `pause` between events, and
/// otherwise answers whole after generating for as long.
fn scripted_model(pause: Duration) -> impl Fn(&Received) -> Vec<Step> + Send + Sync + 'static {
    move |request: &Received| {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let events = streamed_events(&body);
        if body["stream"] != true {
            let whole = json!({
                "id": "chatcmpl-sdk", "object": "chat.completion", "created": 1_764_000_000,
                "model": "sim-large-2026-11-01",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there, friend"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
            });
            return vec![
                Step::Pause(pause * events.len() as u32),
                Step::Send(response(
                    "200 OK",
                    &[],
                    "application/json",
                    whole.to_string().as_bytes(),
                )),
            ];
        }
        let mut steps = vec![Step::Send(sse_head())];
        for event in events {
            steps.push(Step::Send(event));
            steps.push(Step::Pause(pause));
        }
        steps
    }
}

/// What the SDK makes of serve's answers: each call's parsed fields, as
/// JSON on stdout.
/// serve of `config` with the test keys, and the directory that holds its
/// `records`.
fn serve_config(config: &std::path::Path) -> (crate::common::Served, tempfile::TempDir) {
    let pipeline = Pipeline::shared();
    let directory = tempfile::tempdir().unwrap();
    let keys = directory.path().join("keys.toml");
    write_keys(&keys);
    let served = start_serve(
        config,
        &pipeline.out.join("keys/demo.key.pub"),
        &pipeline.out.join("router.bin"),
        &keys,
        &directory.path().join("records"),
        &[],
    );
    (served, directory)
}

/// The gate of a primary and its fallback, both on `upstream`, the primary
/// with `breaker` (TOML lines of its route): where it signed, and what it
/// printed.
fn gate_falling_back(
    name: &str,
    upstream: &ScriptedUpstream,
    breaker: &str,
) -> (std::path::PathBuf, std::process::Output) {
    let pipeline = Pipeline::shared();
    let table = pipeline.path(&format!("{name}.toml"));
    let text = falling_back(&upstream.base_url(), &upstream.base_url(), breaker, 20_000);
    std::fs::write(&table, text).unwrap();
    let out = pipeline.path(name);
    let gated = gate_single(pipeline, &table, &out, None, false)
        .output()
        .unwrap();
    (out, gated)
}

const SDK_CALLS: &str = r#"
import json, sys
import openai, pydantic

client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
model = "support-assistant"
ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
out = {}

r = client.chat.completions.create(model=model, messages=ask)
out["text"] = {"id": r.id, "object": r.object, "content": r.choices[0].message.content,
               "role": r.choices[0].message.role, "finish": r.choices[0].finish_reason,
               "usage": r.usage.model_dump(exclude_none=True), "fingerprint": r.system_fingerprint}

tools = [{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
r = client.chat.completions.create(model=model, messages=ask, tools=tools)
out["tools"] = {"finish": r.choices[0].finish_reason, "content": r.choices[0].message.content,
                "calls": [{"id": c.id, "type": c.type, "name": c.function.name,
                           "arguments": json.loads(c.function.arguments)}
                          for c in r.choices[0].message.tool_calls]}

r = client.chat.completions.create(model=model, messages=ask, n=2)
out["n"] = [[c.index, c.message.content] for c in r.choices]

class Answer(pydantic.BaseModel):
    answer: str

r = client.chat.completions.parse(model=model, messages=ask, response_format=Answer)
out["parsed"] = r.choices[0].message.parsed.answer

r = client.chat.completions.create(model=model, messages=ask, logprobs=True, top_logprobs=1)
out["logprobs"] = [t.token for t in r.choices[0].logprobs.content]

calls = {}
for chunk in client.chat.completions.create(model=model, messages=ask, tools=tools, stream=True):
    for choice in chunk.choices:
        for call in choice.delta.tool_calls or []:
            calls.setdefault(call.index, "")
            calls[call.index] += call.function.arguments or ""
out["streamed_tools"] = calls

text, usage_chunks = "", 0
for chunk in client.chat.completions.create(model=model, messages=ask, stream=True):
    for choice in chunk.choices:
        text += choice.delta.content or ""
    usage_chunks += chunk.usage is not None or not chunk.choices
out["streamed_text"] = text
out["unasked_usage_chunks"] = usage_chunks

usage = []
for chunk in client.chat.completions.create(model=model, messages=ask, stream=True,
                                             stream_options={"include_usage": True}):
    if chunk.usage is not None:
        usage.append([len(chunk.choices), chunk.usage.model_dump(exclude_none=True)])
out["asked_usage"] = usage

print(json.dumps(out))
"#;

#[test]
fn the_openai_sdk_reads_assembled_and_streamed_answers_with_tools_n_formats_and_logprobs() {
    let Some(python) = proxy_python("the OpenAI SDK against serve") else {
        return;
    };
    let upstream = ScriptedUpstream::start(scripted_model(Duration::ZERO));
    let pipeline = Pipeline::shared();
    let config = signed_single(pipeline, &upstream.base_url(), "sdk", None);
    let (served, directory) = serve_config(&config);
    let records = directory.path().join("records");
    let output = run_python_with(&python, SDK_CALLS, &[&served.url("/v1"), KEY]);
    let read: Value = serde_json::from_str(&output).unwrap();
    assert_eq!(
        read["text"],
        json!({"id": "chatcmpl-sdk", "object": "chat.completion", "content": "Hello there, friend",
               "role": "assistant", "finish": "stop",
               "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
               "fingerprint": "fp_sdk"})
    );
    assert_eq!(
        read["tools"],
        json!({"finish": "tool_calls", "content": null,
               "calls": [{"id": "call_1", "type": "function", "name": "get_weather", "arguments": {"city": "Oslo"}}]})
    );
    assert_eq!(
        read["n"],
        json!([[0, "answer number 0"], [1, "answer number 1"]])
    );
    assert_eq!(read["parsed"], "5 days");
    assert_eq!(read["logprobs"], json!(["Hello t", "here, f", "riend"]));
    assert_eq!(read["streamed_tools"], json!({"0": "{\"city\":\"Oslo\"}"}));
    assert_eq!(read["streamed_text"], "Hello there, friend");
    // A streaming client that did not ask for usage (the SDK's default)
    // gets no usage chunk; one that asked gets it once, as sent.
    assert_eq!(read["unasked_usage_chunks"], 0);
    assert_eq!(
        read["asked_usage"],
        json!([[0, {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}]])
    );
    // Every call went upstream as a stream asking for its usage: the five
    // the client did not stream, and the three it streamed, whatever it
    // asked.
    let sent: Vec<Value> = upstream
        .requests()
        .iter()
        .map(|request| serde_json::from_slice(&request.body).unwrap())
        .collect();
    assert_eq!(sent.len(), 8);
    for body in &sent {
        assert_eq!(body["stream"], true, "{body}");
        assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    }
    served.stop();
    let records = served_records(
        &records,
        &[
            "status",
            "finish_reason",
            "input_tokens",
            "output_tokens",
            "token_source",
        ],
    );
    assert_eq!(records.len(), 8);
    // So every record counts the route's own usage, and says so.
    for record in &records {
        assert_eq!(record["status"], "ok", "{record}");
        assert_eq!(record["input_tokens"], 12.0, "{record}");
        assert_eq!(record["output_tokens"], 7.0, "{record}");
        assert_eq!(record["token_source"], "provider", "{record}");
    }
}

#[test]
fn a_long_healthy_answer_to_a_client_that_does_not_stream_is_not_a_dead_route() {
    // 2.7 s of generation behind a breaker that wants a first token in 1 s.
    let upstream = ScriptedUpstream::start(scripted_model(Duration::from_millis(450)));
    let breaker =
        "\n[routes.breaker]\nfirst_token_deadline_ms = 1000.0\nopen_after = 2\nopen_ms = 60000.0\n";
    let (out, gated) = gate_falling_back("long-answer", &upstream, breaker);
    assert!(gated.status.success());
    let (served, directory) = serve_config(&out.join("route-config.v1.json"));
    let records = directory.path().join("records");
    let body = json!({"model": "support-assistant",
                      "messages": [{"role": "user", "content": "Tell me a long story"}]});
    for _ in 0..3 {
        let answer = served.post(KEY, "billing", &body, &[]);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("Hello there, friend"), "{answer}");
        assert!(answer.contains("x-routeval-route: large"), "{answer}");
    }
    served.stop();
    let records = served_records(
        &records,
        &["route", "reason", "status", "ttft_ms", "total_ms"],
    );
    assert_eq!(records.len(), 3, "{records:?}");
    for record in &records {
        assert_eq!(record["route"], "large", "{record}");
        assert_eq!(record["status"], "ok", "{record}");
        assert!(record["ttft_ms"].as_f64().unwrap() < 1000.0, "{record}");
        assert!(record["total_ms"].as_f64().unwrap() >= 2600.0, "{record}");
    }
    assert_eq!(upstream.requests().len(), 3, "no call was repeated");
}

#[test]
fn a_route_that_cannot_stream_is_bounded_by_the_total_deadline_and_the_gate_says_so() {
    let upstream = ScriptedUpstream::start(scripted_model(Duration::from_millis(300)));
    let breaker = "stream_upstream = false\n\n[routes.breaker]\nfirst_token_deadline_ms = 1000.0\nopen_after = 2\nopen_ms = 60000.0\n";
    let (out, gated) = gate_falling_back("whole-answers", &upstream, breaker);
    assert!(gated.status.success());
    let printed = String::from_utf8_lossy(&gated.stdout);
    assert!(
        printed.contains("route \"large\" has stream_upstream = false")
            && printed.contains("cannot see a slow first token"),
        "{printed}"
    );
    let (served, directory) = serve_config(&out.join("route-config.v1.json"));
    let records = directory.path().join("records");
    let body = json!({"model": "support-assistant",
                      "messages": [{"role": "user", "content": "Tell me a long story"}]});
    let answer = served.post(KEY, "billing", &body, &[]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("x-routeval-route: large"), "{answer}");
    let sent: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    assert_eq!(sent.get("stream"), None, "{sent}");
    served.stop();
    let records = served_records(&records, &["route", "status", "ttft_ms"]);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["route"], "large");
    assert_eq!(records[0]["status"], "ok");
    assert!(
        records[0]["ttft_ms"].as_f64().unwrap() >= 1800.0,
        "{records:?}"
    );
}

/// A model whose stream does what the prompt says: `comments` keeps the
/// connection with SSE comments before it answers (as OpenRouter does
/// while a request is queued); `fails midway` sends some text, then an
/// OpenAI-style error event and `[DONE]` (as vLLM and LiteLLM do when
/// generation fails); `absurd usage` answers with usage past 2^64.
fn faulty_model(request: &Received) -> Vec<Step> {
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    let asked = body["messages"][0]["content"].as_str().unwrap_or_default();
    let mut events = vec![sse_head()];
    let text = |content: &str| {
        event(
            json!([{"index": 0, "delta": {"content": content}, "finish_reason": null}]),
            None,
        )
    };
    match asked {
        "comments" => {
            for _ in 0..3 {
                events.push(b": PROCESSING\n\n".to_vec());
            }
            events.extend(streamed_events(&body).into_iter().skip(1));
        }
        "fails midway" => {
            events.push(text("Hello"));
            events.push(
                b"data: {\"error\": {\"message\": \"generation failed\", \"type\": \"server_error\"}}\n\n"
                    .to_vec(),
            );
            events.push(b"data: [DONE]\n\n".to_vec());
        }
        _ => {
            events.push(text("Hello there, friend"));
            events.push(event(
                json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
                Some(json!({"prompt_tokens": u64::MAX, "completion_tokens": 7,
                            "prompt_tokens_details": {"cached_tokens": u64::MAX}})),
            ));
            events.push(b"data: [DONE]\n\n".to_vec());
        }
    }
    events.into_iter().map(Step::Send).collect()
}

const SDK_FAULTS: &str = r#"
import json, sys
import openai

client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)
out = {}
for asked in ["comments", "fails midway", "absurd usage"]:
    for stream in [False, True]:
        ask = dict(model="support-assistant", messages=[{"role": "user", "content": asked}],
                   extra_headers={"x-request-id": f"{asked.replace(' ', '-')}-{stream}"})
        seen = {"text": ""}
        try:
            if stream:
                for chunk in client.chat.completions.create(stream=True, **ask):
                    for choice in chunk.choices:
                        seen["text"] += choice.delta.content or ""
            else:
                r = client.chat.completions.create(**ask)
                seen["text"] = r.choices[0].message.content
                seen["finish"] = r.choices[0].finish_reason
        except openai.APIStatusError as error:
            seen["raised"] = type(error).__name__
            seen["status"] = error.status_code
        except openai.APIError as error:
            seen["raised"] = type(error).__name__
            seen["message"] = str(error.message)
        out[f"{asked} {'streamed' if stream else 'whole'}"] = seen
print(json.dumps(out))
"#;

#[test]
fn the_openai_sdk_gets_an_error_for_a_failed_generation_and_comments_and_odd_usage_pass() {
    let Some(python) = proxy_python("the OpenAI SDK against serve") else {
        return;
    };
    let upstream = ScriptedUpstream::start(faulty_model);
    let config = signed_single(Pipeline::shared(), &upstream.base_url(), "sdk-faults", None);
    let (served, directory) = serve_config(&config);
    let output = run_python_with(&python, SDK_FAULTS, &[&served.url("/v1"), KEY]);
    served.stop();
    let read: Value = serde_json::from_str(&output).unwrap();
    // Comments are no answer: the text is the answer's, whole.
    assert_eq!(
        read["comments whole"],
        json!({"text": "Hello there, friend", "finish": "stop"})
    );
    assert_eq!(read["comments streamed"]["text"], "Hello there, friend");
    // A generation that failed is an error the SDK raises, never a 200
    // with the text cut short.
    let whole = &read["fails midway whole"];
    assert_eq!(whole["raised"], "InternalServerError", "{whole}");
    assert!(whole["status"].as_u64().unwrap() >= 500, "{whole}");
    let streamed = &read["fails midway streamed"];
    assert_eq!(streamed["raised"], "APIError", "{streamed}");
    assert_eq!(streamed["text"], "Hello", "{streamed}");
    // Usage past any request's is the route's problem, not the client's.
    assert_eq!(
        read["absurd usage whole"],
        json!({"text": "Hello there, friend", "finish": "stop"})
    );
    assert_eq!(read["absurd usage streamed"]["text"], "Hello there, friend");
    let records = served_records(
        &directory.path().join("records"),
        &[
            "id",
            "status",
            "finish_reason",
            "input_tokens",
            "cost_usd",
            "token_source",
        ],
    );
    let record = |id: &str| {
        records
            .iter()
            .find(|record| record["id"] == id)
            .unwrap_or_else(|| panic!("no record {id}: {records:?}"))
            .clone()
    };
    for id in ["comments-False", "comments-True"] {
        assert_eq!(record(id)["status"], "ok", "{id}");
    }
    for id in ["fails-midway-False", "fails-midway-True"] {
        let failed = record(id);
        assert_eq!(failed["status"], "error", "{failed}");
        assert_eq!(failed["finish_reason"], "upstream_error", "{failed}");
    }
    // The record estimates the prompt, as it does for a route that gives
    // no usage, rather than count 2^64 tokens.
    for id in ["absurd-usage-False", "absurd-usage-True"] {
        let odd = record(id);
        assert_eq!(odd["status"], "ok", "{odd}");
        let input = odd["input_tokens"].as_f64().unwrap();
        assert!((1.0..100.0).contains(&input), "{odd}");
        assert!(odd["cost_usd"].as_f64().unwrap() < 0.01, "{odd}");
        assert_eq!(odd["token_source"], "estimated", "{odd}");
    }
}
