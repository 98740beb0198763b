//! What an upstream answer says, read from its bytes as they pass: the text
//! (a cascade's verifier needs it) or only its length (a streamed answer
//! passed on may be of any size), the model version, the usage and the
//! finish reason, for a streamed (SSE) or whole JSON response.

use serde_json::Value;

/// The estimated tokens of a conversation's contents, as `run` estimates a
/// prompt whose endpoint reported no usage.
pub fn message_tokens(messages: &[Value]) -> u64 {
    messages
        .iter()
        .filter_map(|message| message["content"].as_str())
        .map(crate::client::estimate_tokens)
        .sum()
}

/// What has been read of one answer so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Answer {
    /// The text, when kept ([`Answer::keeping_text`], or a whole answer).
    pub text: String,
    /// Characters of text seen, kept or not.
    pub text_chars: u64,
    keep_text: bool,
    pub model: Option<String>,
    pub finish_reason: Option<String>,
    pub input_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// The verdict token's alternatives, where the endpoint returned them.
    pub logprobs: Option<Vec<(String, f64)>>,
    /// An SSE line not yet ended.
    partial: Vec<u8>,
}

impl Answer {
    /// An answer whose streamed text is kept, for a reader of it (a
    /// verifier); others count its characters only, so what serve holds
    /// does not grow with the answer.
    pub fn keeping_text() -> Answer {
        Answer {
            keep_text: true,
            ..Answer::default()
        }
    }

    /// A whole (non-streamed) chat completion, its text kept.
    pub fn of_json(body: &[u8]) -> Answer {
        let mut answer = Answer::keeping_text();
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            answer.absorb(&value, false);
        }
        answer
    }

    /// Reads the SSE bytes of `chunk`; lines may span chunks.
    pub fn feed_sse(&mut self, chunk: &[u8]) {
        self.partial.extend_from_slice(chunk);
        while let Some(end) = self.partial.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                continue;
            }
            if let Ok(value) = serde_json::from_str::<Value>(data) {
                self.absorb(&value, true);
            }
        }
    }

    fn absorb(&mut self, value: &Value, streamed: bool) {
        if let Some(model) = value["model"].as_str() {
            self.model = Some(model.to_owned());
        }
        let choice = &value["choices"][0];
        let part = if streamed {
            &choice["delta"]["content"]
        } else {
            &choice["message"]["content"]
        };
        if let Some(text) = part.as_str() {
            self.text_chars += text.chars().count() as u64;
            if self.keep_text {
                self.text.push_str(text);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_owned());
        }
        if let Some(first) = choice["logprobs"]["content"][0]["top_logprobs"].as_array() {
            self.logprobs = Some(
                first
                    .iter()
                    .filter_map(|choice| {
                        Some((
                            choice["token"].as_str()?.to_owned(),
                            choice["logprob"].as_f64()?,
                        ))
                    })
                    .collect(),
            );
        }
        let usage = &value["usage"];
        if usage.is_object() {
            self.input_tokens = usage["prompt_tokens"].as_u64();
            self.output_tokens = usage["completion_tokens"].as_u64();
            self.cached_input_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_and_whole_answers_read_the_same() {
        let whole = Answer::of_json(
            br#"{"model":"m-1","choices":[{"message":{"content":"5 days"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
        );
        let mut streamed = Answer::keeping_text();
        let sse = "data: {\"model\":\"m-1\",\"choices\":[{\"delta\":{\"content\":\"5 \"}}]}\n\ndata: {\"model\":\"m-1\",\"choices\":[{\"delta\":{\"content\":\"days\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        // Split mid-line: lines span the chunks they arrive in.
        let (first, second) = sse.as_bytes().split_at(37);
        streamed.feed_sse(first);
        streamed.feed_sse(second);
        for answer in [&whole, &streamed] {
            assert_eq!(answer.text, "5 days");
            assert_eq!(answer.text_chars, 6);
            assert_eq!(answer.model.as_deref(), Some("m-1"));
            assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
            assert_eq!(
                (answer.input_tokens, answer.output_tokens),
                (Some(9), Some(2))
            );
        }
    }

    #[test]
    fn a_streamed_answer_passed_on_counts_its_text_without_keeping_it() {
        let mut passed = Answer::default();
        passed.feed_sse(b"data: {\"choices\":[{\"delta\":{\"content\":\"f\\u00fcnf Tage\"}}]}\n\n");
        assert_eq!(passed.text, "");
        assert_eq!(passed.text_chars, 9);
    }
}
