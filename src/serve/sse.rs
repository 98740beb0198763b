//! An upstream's server-sent events, framed as they pass: bytes are given
//! to the client an event at a time, each checked to be what an OpenAI
//! client can read (every `data:` a JSON value or `[DONE]`). The work is
//! linear in the bytes, and one event may be at most [`MAX_EVENT_BYTES`]:
//! an upstream that sends a malformed event, or one that never ends, is
//! cut with an OpenAI-style error event instead of bytes a client's SDK
//! would choke on.

/// Whether a response is server-sent events. Media types are
/// case-insensitive (RFC 9110 8.3.1): `Text/Event-Stream` is a stream.
pub(super) fn is_sse(content_type: Option<&axum::http::HeaderValue>) -> bool {
    content_type
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The largest single event passed on.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Why an upstream's stream stopped being passed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// A `data:` field that is neither JSON nor `[DONE]`.
    NotJson,
    /// An event longer than [`MAX_EVENT_BYTES`] with no end in sight.
    TooLong,
}

impl Malformed {
    pub fn message(&self, route: &str) -> String {
        match self {
            Malformed::NotJson => {
                format!("route {route:?} sent a stream event that is not JSON; the answer was cut")
            }
            Malformed::TooLong => format!(
                "route {route:?} sent a stream event longer than {MAX_EVENT_BYTES} bytes; the answer was cut"
            ),
        }
    }
}

/// Whether an event goes to the client.
enum Keep {
    Pass,
    Withhold,
}

/// What tells a usage-only event: a `usage` (not null), no choices, no
/// error. An event of another shape is read as any JSON.
#[derive(serde::Deserialize)]
struct UsageOnly<'a> {
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default, borrow)]
    usage: Option<&'a serde_json::value::RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a serde_json::value::RawValue>,
}

/// `stream`'s events for a client that did not ask for usage, and the
/// usage-only events kept from it; a stream that does not frame is
/// passed as it is (it was checked as it was read).
pub fn without_usage(stream: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut framer = Framer::withholding_usage();
    let mut events = Vec::new();
    match framer
        .push(stream, &mut events)
        .and_then(|()| framer.finish(&mut events))
    {
        Ok(()) => (events, framer.withheld),
        Err(_) => (stream.to_vec(), Vec::new()),
    }
}

/// The events read so far, and the start of the next.
#[derive(Debug, Default)]
pub struct Framer {
    pending: Vec<u8>,
    /// Where the current line starts in `pending`.
    line_start: usize,
    /// How far `pending` has been searched for a line's end.
    scanned: usize,
    /// The `data:` fields of the current event, joined by newlines.
    data: Vec<u8>,
    has_data: bool,
    /// The stream's `[DONE]` has been framed.
    pub done: bool,
    /// Usage-only events are kept from the client ([`Framer::withholding_usage`]).
    withhold_usage: bool,
    /// The events withheld so far, for serve's record to read.
    pub withheld: Vec<u8>,
}

impl Framer {
    /// A framer that keeps usage-only events (a chunk with no choices and
    /// a `usage`) from the client, into [`Framer::withheld`]: serve asks
    /// every stream for its usage, and a client that did not ask
    /// (`stream_options.include_usage`) gets the stream it asked for.
    pub fn withholding_usage() -> Framer {
        Framer {
            withhold_usage: true,
            ..Framer::default()
        }
    }

    pub fn withholds_usage(&self) -> bool {
        self.withhold_usage
    }

    /// Adds `chunk`; the whole events it completes (raw bytes, to pass on),
    /// or why the stream is malformed.
    pub fn push(&mut self, chunk: &[u8], events: &mut Vec<u8>) -> Result<(), Malformed> {
        self.push_seeing(chunk, events, &mut |_| {})
    }

    /// [`Framer::push`], showing `seen` each completed event's data (its
    /// `data:` fields joined) before it is checked.
    fn push_seeing(
        &mut self,
        chunk: &[u8],
        events: &mut Vec<u8>,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Malformed> {
        self.pending.extend_from_slice(chunk);
        let mut event_start = 0;
        while let Some(offset) = self.pending[self.scanned..]
            .iter()
            .position(|&byte| byte == b'\n')
        {
            let end = self.scanned.saturating_add(offset);
            let line = &self.pending[self.line_start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                let keep = self.finish_event(seen)?;
                let event = &self.pending[event_start..=end];
                match keep {
                    Keep::Pass => events.extend_from_slice(event),
                    Keep::Withhold => self.withheld.extend_from_slice(event),
                }
                event_start = end.saturating_add(1);
            } else if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            self.line_start = end.saturating_add(1);
            self.scanned = self.line_start;
        }
        self.scanned = self.pending.len();
        self.pending.drain(..event_start);
        self.line_start = self.line_start.saturating_sub(event_start);
        self.scanned = self.scanned.saturating_sub(event_start);
        if self.pending.len() > MAX_EVENT_BYTES || self.data.len() > MAX_EVENT_BYTES {
            return Err(Malformed::TooLong);
        }
        Ok(())
    }

    fn finish_event(&mut self, seen: &mut dyn FnMut(&[u8])) -> Result<Keep, Malformed> {
        if !self.has_data {
            return Ok(Keep::Pass);
        }
        let data = std::mem::take(&mut self.data);
        self.has_data = false;
        seen(&data);
        if data.trim_ascii() == b"[DONE]" {
            self.done = true;
            return Ok(Keep::Pass);
        }
        if self.withhold_usage
            && let Ok(event) = serde_json::from_slice::<UsageOnly<'_>>(&data)
        {
            let usage_only = event.usage.is_some()
                && event.error.is_none()
                && event.choices.is_none_or(|choices| choices.is_empty());
            return Ok(if usage_only {
                Keep::Withhold
            } else {
                Keep::Pass
            });
        }
        match serde_json::from_slice::<serde::de::IgnoredAny>(&data) {
            Ok(_) => Ok(Keep::Pass),
            Err(_) => Err(Malformed::NotJson),
        }
    }

    /// Bytes left when the upstream ended: a last event without its blank
    /// line, passed on if it is well formed.
    pub fn finish(&mut self, events: &mut Vec<u8>) -> Result<(), Malformed> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let end: &[u8] = if self.pending.ends_with(b"\n") {
            b"\n"
        } else {
            b"\n\n"
        };
        self.push(end, events)
    }
}

/// Watches a stream's first bytes for its first token: the first event
/// that says something (a content, refusal or reasoning delta that is not
/// empty, a tool call, a finish reason, an error, `[DONE]`, or data that
/// is not JSON, which the [`Framer`] will refuse). Comments and empty
/// deltas are not tokens. Events are read by the [`Framer`] that frames
/// them for the client. Past [`MAX_EVENT_BYTES`] without one, the watch
/// ends and the stream is taken as begun, so it holds no more than that.
#[derive(Debug, Default)]
pub struct FirstToken {
    /// The first token was an error event: generation failed before it
    /// said anything.
    pub error: bool,
    events: Framer,
    seen: usize,
}

impl FirstToken {
    /// Whether `chunk` completes the first event that is a token.
    pub fn sees_token(&mut self, chunk: &[u8]) -> bool {
        self.seen = self.seen.saturating_add(chunk.len());
        let (mut found, mut error) = (false, false);
        let mut passed = Vec::new();
        let framed = self.events.push_seeing(chunk, &mut passed, &mut |data| {
            if !found && says_something(data) {
                found = true;
                error = is_error(data);
            }
        });
        if found {
            self.error = error;
        }
        found || framed.is_err() || self.seen > MAX_EVENT_BYTES
    }
}

/// Whether an event's data is an OpenAI-style error event.
fn is_error(data: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(data).is_ok_and(|event| !event["error"].is_null())
}

/// Whether an event's data is a token (see [`FirstToken`]).
fn says_something(data: &[u8]) -> bool {
    if data.trim_ascii() == b"[DONE]" {
        return true;
    }
    let Ok(event) = serde_json::from_slice::<serde_json::Value>(data) else {
        return true;
    };
    if !event["error"].is_null() {
        return true;
    }
    let filled = |value: &serde_json::Value| match value {
        serde_json::Value::Null => false,
        serde_json::Value::String(text) => !text.is_empty(),
        serde_json::Value::Array(items) => !items.is_empty(),
        _ => true,
    };
    event["choices"].as_array().is_some_and(|choices| {
        choices.iter().any(|choice| {
            let delta = &choice["delta"];
            filled(&choice["finish_reason"])
                || filled(&choice["text"])
                || [
                    "content",
                    "refusal",
                    "reasoning_content",
                    "reasoning",
                    "tool_calls",
                    "function_call",
                ]
                .iter()
                .any(|field| filled(&delta[*field]))
        })
    })
}

/// The event that ends a cut stream: an OpenAI-style error, which the
/// OpenAI SDKs raise as an `APIError`.
pub fn error_event(message: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "error": {"message": message, "type": "upstream_error", "param": null, "code": null}
    });
    format!("data: {body}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(chunks: &[&[u8]]) -> (Vec<u8>, Result<(), Malformed>, bool) {
        let mut framer = Framer::default();
        let mut events = Vec::new();
        for chunk in chunks {
            if let Err(malformed) = framer.push(chunk, &mut events) {
                return (events, Err(malformed), framer.done);
            }
        }
        let ended = framer.finish(&mut events);
        (events, ended, framer.done)
    }

    #[test]
    fn whole_events_pass_however_the_bytes_are_split() {
        let stream =
            b"data: {\"a\":1}\n\n: keep-alive\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let (first, second) = stream.split_at(split);
            let (events, ended, done) = frame(&[first, second]);
            assert_eq!(events, stream.to_vec(), "split at {split}");
            assert_eq!(ended, Ok(()));
            assert!(done);
        }
    }

    #[test]
    fn only_usage_only_events_are_withheld_and_every_event_is_still_checked() {
        let content = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n";
        let last = b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3}}\n\n";
        let usage = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\r\n\r\n";
        let error = b"data: {\"error\":{\"message\":\"x\"},\"usage\":{}}\n\n";
        let stream = [&content[..], last, usage, error, b"data: [DONE]\n\n"].concat();
        for split in 0..stream.len() {
            let mut framer = Framer::withholding_usage();
            let mut events = Vec::new();
            let (first, second) = stream.split_at(split);
            framer.push(first, &mut events).unwrap();
            framer.push(second, &mut events).unwrap();
            framer.finish(&mut events).unwrap();
            let passed = [&content[..], last, error, b"data: [DONE]\n\n"].concat();
            assert_eq!(events, passed, "split at {split}");
            assert_eq!(framer.withheld, usage.to_vec(), "split at {split}");
            assert!(framer.done);
        }
        let (events, ended, _) = {
            let mut framer = Framer::withholding_usage();
            let mut events = Vec::new();
            let ended = framer.push(b"data: {\"usage\": oops}\n\n", &mut events);
            (events, ended, framer.done)
        };
        assert!(events.is_empty());
        assert_eq!(ended, Err(Malformed::NotJson));
        assert_eq!(
            without_usage(&stream),
            (
                [&content[..], last, error, b"data: [DONE]\n\n"].concat(),
                usage.to_vec()
            )
        );
    }

    #[test]
    fn an_event_is_held_until_its_blank_line() {
        let mut framer = Framer::default();
        let mut events = Vec::new();
        framer.push(b"data: {\"a\":", &mut events).unwrap();
        assert!(events.is_empty());
        framer.push(b"1}\n", &mut events).unwrap();
        assert!(events.is_empty());
        framer.push(b"\ndata: [DO", &mut events).unwrap();
        assert_eq!(events, b"data: {\"a\":1}\n\n");
        assert!(!framer.done);
    }

    #[test]
    fn a_data_field_that_is_not_json_is_malformed_and_not_passed() {
        let (events, ended, _) = frame(&[b"data: {\"a\":1}\n\ndata: {oops\n\ndata: {\"b\":2}\n\n"]);
        assert_eq!(events, b"data: {\"a\":1}\n\n");
        assert_eq!(ended, Err(Malformed::NotJson));
    }

    #[test]
    fn an_endless_event_is_cut_at_the_bound() {
        let line = vec![b'x'; 64 << 10];
        let mut framer = Framer::default();
        let mut events = Vec::new();
        let mut fed = 0;
        let cut = loop {
            fed += line.len();
            if let Err(malformed) = framer.push(&line, &mut events) {
                break malformed;
            }
        };
        assert_eq!(cut, Malformed::TooLong);
        assert!(fed <= MAX_EVENT_BYTES + line.len());
        assert!(events.is_empty());
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_passed_at_the_end() {
        let (events, ended, done) = frame(&[b"data: {\"a\":1}\n\ndata: [DONE]"]);
        assert_eq!(ended, Ok(()));
        assert!(done);
        assert_eq!(events, b"data: {\"a\":1}\n\ndata: [DONE]\n\n");
    }

    #[test]
    fn comments_and_empty_deltas_are_not_a_first_token_and_content_is() {
        let mut watch = FirstToken::default();
        assert!(!watch.sees_token(b": PROCESSING\n\n: PROCESSING\n\n"));
        let role = br#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert!(!watch.sees_token(role));
        assert!(!watch.sees_token(b"\n\n"));
        assert!(!watch.sees_token(b"data: {\"choices\":[{\"delta\":{\"con"));
        assert!(watch.sees_token(b"tent\":\"Hi\"}}]}\r\n\r\n"));
        for token in [
            &br#"data: {"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#[..],
            br#"data: {"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            br#"data: {"error":{"message":"failed"}}"#,
            b"data: [DONE]",
            b"data: not json",
        ] {
            let mut watch = FirstToken::default();
            assert!(watch.sees_token(&[token, b"\n\n"].concat()), "{token:?}");
            assert_eq!(
                watch.error,
                token.starts_with(b"data: {\"error"),
                "{token:?}"
            );
        }
        let mut endless = FirstToken::default();
        let comment = b": keep-alive\n\n".repeat(MAX_EVENT_BYTES / 14 + 1);
        assert!(endless.sees_token(&comment));
    }
}
