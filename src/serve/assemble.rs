//! The OpenAI non-streamed chat completion, assembled from a streamed
//! one's chunks. serve calls every route that can stream with streaming,
//! whatever the client asked, so that the first-token deadline, the stall
//! timer, the breaker and `ttft_ms` mean the same for every request; a
//! client that did not ask to stream gets this assembly, as the OpenAI API
//! would have answered it: each choice's `message` (`content`, `refusal`,
//! `tool_calls` joined from their deltas by index), `logprobs` where the
//! chunks carried them, `finish_reason`, and the last chunk's `usage`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// One choice, as its deltas arrive.
#[derive(Debug, Default)]
struct Choice {
    role: Option<String>,
    content: Option<String>,
    refusal: Option<String>,
    /// By the delta's `index`.
    tool_calls: BTreeMap<u64, ToolCall>,
    logprobs_content: Option<Vec<Value>>,
    logprobs_refusal: Option<Vec<Value>>,
    finish_reason: Option<Value>,
}

#[derive(Debug, Default)]
struct ToolCall {
    id: Option<String>,
    kind: Option<String>,
    name: String,
    arguments: String,
}

/// The completion read so far.
#[derive(Debug, Default)]
pub struct Assembly {
    id: Option<Value>,
    created: Option<Value>,
    model: Option<Value>,
    system_fingerprint: Option<Value>,
    service_tier: Option<Value>,
    usage: Option<Value>,
    choices: BTreeMap<u64, Choice>,
}

fn append(into: &mut Option<String>, part: &Value) {
    if let Some(text) = part.as_str() {
        into.get_or_insert_with(String::new).push_str(text);
    }
}

fn extend(into: &mut Option<Vec<Value>>, part: &Value) {
    if let Some(items) = part.as_array() {
        into.get_or_insert_with(Vec::new)
            .extend(items.iter().cloned());
    }
}

impl Assembly {
    /// Whether every choice has its `finish_reason`: a stream closed
    /// without `[DONE]` is whole only then.
    pub fn finished(&self) -> bool {
        !self.choices.is_empty()
            && self
                .choices
                .values()
                .all(|choice| choice.finish_reason.is_some())
    }

    /// Reads one event's `data` (a `chat.completion.chunk`).
    pub fn add(&mut self, chunk: &Value) {
        for (field, slot) in [
            ("id", &mut self.id),
            ("created", &mut self.created),
            ("model", &mut self.model),
            ("system_fingerprint", &mut self.system_fingerprint),
            ("service_tier", &mut self.service_tier),
        ] {
            if let Some(value) = chunk.get(field).filter(|value| !value.is_null()) {
                *slot = Some(value.clone());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Some(usage.clone());
        }
        for delta in chunk["choices"].as_array().into_iter().flatten() {
            let index = delta["index"].as_u64().unwrap_or(0);
            let choice = self.choices.entry(index).or_default();
            let part = &delta["delta"];
            if let Some(role) = part["role"].as_str() {
                choice.role = Some(role.to_owned());
            }
            append(&mut choice.content, &part["content"]);
            append(&mut choice.refusal, &part["refusal"]);
            for call in part["tool_calls"].as_array().into_iter().flatten() {
                let slot = choice
                    .tool_calls
                    .entry(call["index"].as_u64().unwrap_or(0))
                    .or_default();
                if let Some(id) = call["id"].as_str() {
                    slot.id = Some(id.to_owned());
                }
                if let Some(kind) = call["type"].as_str() {
                    slot.kind = Some(kind.to_owned());
                }
                if let Some(name) = call["function"]["name"].as_str() {
                    slot.name.push_str(name);
                }
                if let Some(arguments) = call["function"]["arguments"].as_str() {
                    slot.arguments.push_str(arguments);
                }
            }
            extend(&mut choice.logprobs_content, &delta["logprobs"]["content"]);
            extend(&mut choice.logprobs_refusal, &delta["logprobs"]["refusal"]);
            if let Some(reason) = delta.get("finish_reason").filter(|value| !value.is_null()) {
                choice.finish_reason = Some(reason.clone());
            }
        }
    }

    /// The `chat.completion` the client gets.
    pub fn completion(&self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .iter()
            .map(|(index, choice)| {
                let mut message = Map::new();
                message.insert(
                    "role".to_owned(),
                    json!(choice.role.as_deref().unwrap_or("assistant")),
                );
                // An empty text beside tool calls is no text, as the API
                // answers a tool call whole.
                let content = choice
                    .content
                    .as_ref()
                    .filter(|text| !text.is_empty() || choice.tool_calls.is_empty());
                message.insert("content".to_owned(), json!(content));
                message.insert("refusal".to_owned(), json!(choice.refusal));
                if !choice.tool_calls.is_empty() {
                    let calls: Vec<Value> = choice
                        .tool_calls
                        .values()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": call.kind.as_deref().unwrap_or("function"),
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                    message.insert("tool_calls".to_owned(), Value::Array(calls));
                }
                let logprobs = if choice.logprobs_content.is_some()
                    || choice.logprobs_refusal.is_some()
                {
                    json!({"content": choice.logprobs_content, "refusal": choice.logprobs_refusal})
                } else {
                    Value::Null
                };
                json!({
                    "index": index,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": choice.finish_reason,
                })
            })
            .collect();
        let mut completion = Map::new();
        completion.insert("id".to_owned(), self.id.clone().unwrap_or(Value::Null));
        completion.insert("object".to_owned(), json!("chat.completion"));
        completion.insert(
            "created".to_owned(),
            self.created.clone().unwrap_or(json!(0)),
        );
        completion.insert(
            "model".to_owned(),
            self.model.clone().unwrap_or(Value::Null),
        );
        completion.insert("choices".to_owned(), Value::Array(choices));
        if let Some(usage) = &self.usage {
            completion.insert("usage".to_owned(), usage.clone());
        }
        for (field, value) in [
            ("system_fingerprint", &self.system_fingerprint),
            ("service_tier", &self.service_tier),
        ] {
            if let Some(value) = value {
                completion.insert(field.to_owned(), value.clone());
            }
        }
        Value::Object(completion)
    }
}

/// The `chat.completion` of a whole stream's SSE bytes, as JSON.
pub fn completion_of(sse: &[u8]) -> Vec<u8> {
    let mut assembly = Assembly::default();
    for event in events(sse) {
        assembly.add(&event);
    }
    serde_json::to_vec(&assembly.completion()).expect("JSON serialises")
}

/// The events of SSE bytes that the framer passed (whole, well-formed
/// events): each `data` that is a JSON object.
pub fn events(bytes: &[u8]) -> impl Iterator<Item = Value> + '_ {
    bytes
        .split(|&byte| byte == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let data = line.strip_prefix(b"data:")?;
            serde_json::from_slice::<Value>(data.trim_ascii()).ok()
        })
        .filter(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assembled(chunks: &[Value]) -> Value {
        let mut assembly = Assembly::default();
        for chunk in chunks {
            assembly.add(chunk);
        }
        assembly.completion()
    }

    #[test]
    fn text_and_usage_join_as_the_api_answers_them() {
        let completion = assembled(&[
            json!({"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}),
            json!({"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"5 "},"finish_reason":null}]}),
            json!({"id":"c1","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"days"},"finish_reason":"stop"}]}),
            json!({"id":"c1","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}),
        ]);
        assert_eq!(
            completion,
            json!({
                "id": "c1", "object": "chat.completion", "created": 7, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "5 days", "refusal": null},
                             "logprobs": null, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
                "system_fingerprint": "fp",
            })
        );
    }

    #[test]
    fn tool_calls_join_by_index_and_choices_stay_apart() {
        let completion = assembled(&[
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}),
            json!({"choices":[{"index":1,"delta":{"role":"assistant","content":"no tool"}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}),
            json!({"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}),
        ]);
        let first = &completion["choices"][0];
        assert_eq!(first["message"]["content"], Value::Null);
        assert_eq!(first["finish_reason"], "tool_calls");
        assert_eq!(
            first["message"]["tool_calls"],
            json!([
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ])
        );
        assert_eq!(completion["choices"][1]["message"]["content"], "no tool");
        assert_eq!(completion["choices"][1]["index"], 1);
        assert!(completion.get("usage").is_none());
    }

    #[test]
    fn logprobs_join_in_order() {
        let token =
            |text: &str| json!({"token": text, "logprob": -0.5, "bytes": null, "top_logprobs": []});
        let completion = assembled(&[
            json!({"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[token("a")],"refusal":null}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"b"},"logprobs":{"content":[token("b")],"refusal":null},"finish_reason":"stop"}]}),
        ]);
        assert_eq!(
            completion["choices"][0]["logprobs"],
            json!({"content": [token("a"), token("b")], "refusal": null})
        );
    }
}
