//! The response cache: answers addressed by the SHA-256 of everything that
//! determines them (endpoint, model, messages, generation parameters, sample
//! index), one small JSON file each under a two-hex-digit fan-out. Errors and
//! empty answers are never stored; a hit keeps its original latencies.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::CallRequest;

/// What a cached call answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedCall {
    pub model_version: Option<String>,
    pub text: String,
    pub finish_reason: String,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub usage_estimated: bool,
    pub ttft_ms: f64,
    pub total_ms: f64,
    #[serde(default)]
    pub verdict_logprobs: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Cache {
    directory: PathBuf,
}

/// The cache address of a call.
pub fn cache_key(base_url: &str, model: &str, request: &CallRequest, sample: u32) -> String {
    let identity = serde_json::json!({
        "base_url": base_url.trim_end_matches('/'),
        "model": model,
        "messages": request.messages,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "logprobs": request.logprobs,
        "sample": sample,
    });
    let digest = Sha256::digest(identity.to_string().as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl Cache {
    pub fn open(directory: &Path) -> anyhow::Result<Cache> {
        std::fs::create_dir_all(directory).map_err(|error| {
            anyhow::anyhow!(
                "{}: cannot create the cache (--cache-dir): {error}",
                directory.display()
            )
        })?;
        Ok(Cache {
            directory: directory.to_owned(),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.directory.join(&key[..2]).join(format!("{key}.json"))
    }

    /// The stored answer, if any; an unreadable entry is a miss.
    pub fn get(&self, key: &str) -> Option<CachedCall> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Stores an answer; failures only cost a future cache miss.
    pub fn put(&self, key: &str, call: &CachedCall) {
        if call.text.is_empty() {
            return;
        }
        let path = self.path(key);
        let Some(parent) = path.parent() else { return };
        let _ = std::fs::create_dir_all(parent);
        let temporary = parent.join(format!(".{key}.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec(call).expect("serialisable");
        if std::fs::write(&temporary, bytes).is_ok() {
            let _ = std::fs::rename(&temporary, &path);
        } else {
            let _ = std::fs::remove_file(&temporary);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Message, Role};

    fn request(content: &str) -> CallRequest {
        CallRequest {
            messages: vec![Message {
                role: Role::User,
                content: content.to_owned(),
            }],
            temperature: 0.0,
            max_tokens: 64,
            seed: 1,
            logprobs: false,
        }
    }

    #[test]
    fn keys_change_with_everything_that_changes_the_answer() {
        let base = cache_key("http://a/v1", "m-1", &request("hi"), 0);
        assert_eq!(base, cache_key("http://a/v1/", "m-1", &request("hi"), 0));
        assert_ne!(base, cache_key("http://b/v1", "m-1", &request("hi"), 0));
        assert_ne!(base, cache_key("http://a/v1", "m-2", &request("hi"), 0));
        assert_ne!(base, cache_key("http://a/v1", "m-1", &request("ho"), 0));
        assert_ne!(base, cache_key("http://a/v1", "m-1", &request("hi"), 1));
        let mut hotter = request("hi");
        hotter.temperature = 0.7;
        assert_ne!(base, cache_key("http://a/v1", "m-1", &hotter, 0));
    }

    #[test]
    fn answers_round_trip_and_empty_ones_are_not_stored() {
        let directory = tempfile::tempdir().unwrap();
        let cache = Cache::open(directory.path()).unwrap();
        let call = CachedCall {
            model_version: Some("m-1".into()),
            text: "42".into(),
            finish_reason: "stop".into(),
            input_tokens: 10,
            cached_input_tokens: 0,
            output_tokens: 1,
            usage_estimated: false,
            ttft_ms: 12.5,
            total_ms: 20.0,
            verdict_logprobs: None,
        };
        cache.put("ab12", &call);
        assert_eq!(cache.get("ab12"), Some(call.clone()));
        cache.put(
            "cd34",
            &CachedCall {
                text: String::new(),
                ..call
            },
        );
        assert_eq!(cache.get("cd34"), None);
        std::fs::write(directory.path().join("ef").join("ef56.json"), "{").ok();
        assert_eq!(cache.get("ef56"), None);
    }
}
