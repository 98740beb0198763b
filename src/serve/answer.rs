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
    /// The route said generation failed: an `error` object in an event or
    /// in its body (what vLLM and LiteLLM send mid-stream).
    pub error: bool,
    /// A whole answer that is not JSON: nothing of it can be read.
    pub unreadable: bool,
    /// The choices (by `index`) seen, and those seen with a finish reason.
    choices_seen: std::collections::BTreeSet<u64>,
    choices_finished: std::collections::BTreeSet<u64>,
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
        match serde_json::from_slice::<Value>(body) {
            Ok(value) => answer.absorb(&value, false),
            Err(_) => answer.unreadable = true,
        }
        answer
    }

    /// Whether every choice seen has its finish reason (and one was seen).
    pub fn every_choice_finished(&self) -> bool {
        !self.choices_seen.is_empty() && self.choices_seen == self.choices_finished
    }

    /// Reads the SSE bytes of `chunk`; lines may span chunks. The bytes
    /// are scanned once and the read lines dropped once, so a chunk of any
    /// size is read in time linear in it.
    pub fn feed_sse(&mut self, chunk: &[u8]) {
        self.partial.extend_from_slice(chunk);
        let partial = std::mem::take(&mut self.partial);
        let mut start = 0;
        while let Some(offset) = partial[start..].iter().position(|&byte| byte == b'\n') {
            let end = start.saturating_add(offset);
            let line = String::from_utf8_lossy(&partial[start..end]);
            start = end.saturating_add(1);
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
        self.partial = partial;
        self.partial.drain(..start);
    }

    fn absorb(&mut self, value: &Value, streamed: bool) {
        if let Some(model) = value["model"].as_str() {
            self.model = Some(model.to_owned());
        }
        if !value["error"].is_null() {
            self.error = true;
        }
        for (position, each) in value["choices"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = each["index"].as_u64().unwrap_or(position as u64);
            self.choices_seen.insert(index);
            if !each["finish_reason"].is_null() {
                self.choices_finished.insert(index);
            }
        }
        let choice = &value["choices"][0];
        let part = if streamed {
            &choice["delta"]["content"]
        } else {
            &choice["message"]["content"]
        };
        if let Some(text) = part.as_str() {
            self.text_chars = self.text_chars.saturating_add(text.chars().count() as u64);
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
            // A count past what any request has is a provider's error:
            // unknown, as if the route had given none.
            let tokens = |value: &serde_json::Value| {
                value
                    .as_u64()
                    .filter(|tokens| *tokens <= crate::records::MAX_TOKENS)
            };
            let prompt = tokens(&usage["prompt_tokens"]);
            let cached = tokens(&usage["prompt_tokens_details"]["cached_tokens"]);
            // OpenAI counts cached tokens inside the prompt's; a provider
            // that counts more cached than prompt tokens counts them apart.
            self.input_tokens = match (prompt, cached) {
                (Some(prompt), Some(cached)) if cached > prompt => {
                    Some(prompt.saturating_add(cached))
                }
                _ => prompt,
            };
            self.output_tokens = tokens(&usage["completion_tokens"]);
            self.cached_input_tokens = cached;
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
