//! One endpoint with its politeness: the concurrency limit, the request and
//! token buckets, the retry policy and its budget. The runner's tiers and
//! the grader's judge both call through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::client::EndpointConfig;
use crate::client::{AdaptiveLimit, RetryBudget, TokenBucket, backoff};
use crate::client::{AttemptError, CallRequest, ChatEndpoint, Completion};

/// An endpoint and the state of its limits.
#[derive(Debug)]
pub struct Caller<E> {
    pub endpoint: E,
    pub config: EndpointConfig,
    limit: AdaptiveLimit,
    rpm: Option<TokenBucket>,
    tpm: Option<TokenBucket>,
    budget: RetryBudget,
    retries: AtomicU64,
}

/// How a call ended, after its retries.
#[derive(Debug)]
pub struct CallOutcome {
    /// The answer, or the last failure and why it was not retried further.
    pub result: Result<Completion, (AttemptError, String)>,
    pub attempts: u32,
}

pub fn estimate_tokens(text: &str) -> u64 {
    estimated_tokens_of_chars(text.chars().count() as u64)
}

/// The tokens of a text of `chars` characters, as the run estimates them.
pub fn estimated_tokens_of_chars(chars: u64) -> u64 {
    chars.div_ceil(4)
}

pub fn input_tokens_estimate(request: &CallRequest) -> u64 {
    request
        .messages
        .iter()
        .map(|message| estimate_tokens(&message.content))
        .sum()
}

/// A number in [0, 1) from a call's identity, for backoff jitter.
fn jitter_unit(key: &str, retry: u32) -> f64 {
    let digest = Sha256::digest(format!("{key}/{retry}").as_bytes());
    (u64::from_le_bytes(digest[..8].try_into().expect("eight bytes")) >> 11) as f64
        / (1u64 << 53) as f64
}

impl<E: ChatEndpoint> Caller<E> {
    pub fn new(endpoint: E, config: &EndpointConfig, retry_budget: f64) -> Caller<E> {
        Caller {
            endpoint,
            config: config.clone(),
            limit: AdaptiveLimit::new(config.max_concurrency),
            rpm: config
                .rpm
                .map(|rpm| TokenBucket::per_minute(f64::from(rpm))),
            tpm: config.tpm.map(|tpm| TokenBucket::per_minute(tpm as f64)),
            budget: RetryBudget::new(retry_budget),
            retries: AtomicU64::new(0),
        }
    }

    /// Retries made so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Sends `request` until it is answered, fails for good, or the retries
    /// (per call, and the budget) run out. `key` identifies the call, for jitter.
    pub async fn send(&self, request: &CallRequest, key: &str) -> CallOutcome {
        let tokens = (input_tokens_estimate(request) + u64::from(request.max_tokens)) as f64;
        self.budget.first_attempt();
        let mut attempts = 0u32;
        let result = loop {
            attempts += 1;
            if let Some(rpm) = &self.rpm {
                rpm.take(1.0).await;
            }
            if let Some(tpm) = &self.tpm {
                tpm.take(tokens).await;
            }
            let slot = self.limit.acquire().await;
            let outcome = self.endpoint.complete(request).await;
            drop(slot);
            let error = match outcome {
                Ok(completion) => {
                    self.limit.succeeded();
                    break Ok(completion);
                }
                Err(error) => error,
            };
            if let AttemptError::Status { status: 429, .. } = error {
                self.limit.overloaded();
            }
            if !error.retryable() {
                break Err((error, "not retryable".to_owned()));
            }
            if attempts > self.config.max_retries {
                break Err((error, format!("gave up after {attempts} attempts")));
            }
            if !self.budget.try_retry() {
                break Err((error, "the retry budget is spent".to_owned()));
            }
            self.retries.fetch_add(1, Ordering::Relaxed);
            let retry_after = match &error {
                AttemptError::Status { retry_after, .. } => *retry_after,
                _ => None,
            };
            let base = Duration::from_millis(self.config.backoff_base_ms);
            tokio::time::sleep(backoff(
                base,
                attempts,
                retry_after,
                jitter_unit(key, attempts),
            ))
            .await;
        };
        CallOutcome { result, attempts }
    }
}
