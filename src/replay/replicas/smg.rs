//! The Shepherd Model Gateway (`smg`, the SGLang router's successor) as its
//! release 1.13 routes HTTP requests to replicas: `smg@1.13` names its
//! cache-aware policy and, with `policy=`, the others where they differ
//! from routeval's own.
//!
//! Defaults are those of `smg launch` 1.13.0 (`smg/router_args.py` in the
//! PyPI wheel). The decisions follow the gateway's source,
//! `model_gateway/src/policies/` after [`SMG_SOURCE_COMMIT`] (`cache_aware.rs`,
//! `least_load.rs`, `power_of_two.rs`, `prefix_hash.rs`,
//! `consistent_hashing.rs`), for a fleet whose workers report no load (no
//! `/get_load`), as the replay's pool reports none: every policy's
//! expected-wait score is then the router's own in-flight count, and equal
//! scores are drawn uniformly (1.13 samples ties; it no longer takes the
//! first). `tests/replay_smg.rs` checks the replay against the real 1.13.0.

use serde_json::Value;

/// The name `--policy` and `--for` take.
pub const SMG_1_13: &str = "smg@1.13";

/// The gateway's source the decisions were read from: `smg-project/smg` at
/// this commit (v1.9.0-193, 22 August 2026), with the later revisions of
/// the policies' files readable here where they changed a decision
/// (expected-wait selection with sampled ties, the spill gate on the
/// selected holders); the cap on the gate's margin is 1.13.0's own
/// `--balance-abs-threshold` help.
pub const SMG_SOURCE_COMMIT: &str = "f8daa8835a8b4419b53125a837aaab2b3ce895c3";

/// 1.13.0's `--cache-threshold`, `--balance-abs-threshold`,
/// `--balance-rel-threshold`.
pub const CACHE_THRESHOLD: f64 = 0.3;
pub const SPILL_ABS: f64 = 64.0;
pub const SPILL_REL: f64 = 1.5;
/// 1.13.0's `--prefix-token-count`, `--prefix-hash-load-factor`,
/// `--prefix-hash-balance-abs-threshold`.
pub const PREFIX_TOKENS: f64 = 256.0;
pub const PREFIX_LOAD_FACTOR: f64 = 1.25;
pub const PREFIX_ABS: f64 = 10.0;
/// The spill gate's absolute margin is never capped below this many
/// requests (unless `--balance-abs-threshold` is lower).
pub(super) const SPILL_MARGIN_FLOOR: f64 = 4.0;
/// Virtual nodes per worker on the gateway's hash ring.
pub(super) const RING_NODES_PER_WORKER: usize = 150;

/// One of 1.13's policies (`smg launch --policy`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SmgPolicy {
    /// `cache_aware`: the radix tree's longest match, when it covers more
    /// than `threshold` of the prompt, narrows the choice to the workers
    /// holding it that the spill gate lets through; the least loaded of
    /// those (ties drawn) takes it. Below the threshold, or when every
    /// holder is gated, the least loaded of the fleet (of the ungated, on a
    /// spill).
    CacheAware {
        threshold: f64,
        abs_gap: f64,
        rel_gap: f64,
    },
    /// `least_load`: the fewest in flight, ties drawn.
    LeastLoad,
    /// `power_of_two`: two distinct workers drawn, the one with fewer in
    /// flight (a tie drawn).
    PowerOfTwo,
    /// `prefix_hash`. Over HTTP 1.13 hands the policy no text to hash and
    /// no tokens (the gateway tokenizes only for gRPC workers), so with no
    /// `X-SMG-Routing-Key` every request goes to the first least-loaded
    /// worker. With `tokenized`, the gRPC path: the first `prefix_tokens`
    /// tokens hashed onto a ring of 150 points a worker; a worker whose
    /// load passes both `load_factor` × the mean and the mean + `abs_gap`
    /// (the mean counting this request) hands it to the least loaded
    /// worker that does not.
    PrefixHash {
        tokenized: bool,
        prefix_tokens: usize,
        load_factor: f64,
        abs_gap: f64,
    },
    /// `consistent_hashing`: the `X-SMG-Routing-Key` header's point on the
    /// ring; a trace carries no such header, and without one 1.13 draws a
    /// worker uniformly.
    ConsistentHashing,
}

impl SmgPolicy {
    /// `smg@1.13[:policy=NAME,key=value,...]`; `policy` and `tokenized`,
    /// the parameters that are not numbers, are taken out before `take`
    /// reads the numbers.
    pub fn parse<E>(
        (policy, tokenized): (Option<&str>, Option<&str>),
        take: &mut impl FnMut(&str, f64, bool) -> Result<f64, E>,
        parameter: impl Fn(String) -> E,
    ) -> Result<SmgPolicy, E> {
        let tokenized = match (policy, tokenized) {
            (_, None | Some("false")) => false,
            (Some("prefix_hash"), Some("true")) => true,
            (Some("prefix_hash"), Some(other)) => {
                return Err(parameter(format!(
                    "tokenized={other}: expected true or false"
                )));
            }
            (_, Some(_)) => {
                return Err(parameter(
                    "tokenized: only policy=prefix_hash takes it".to_owned(),
                ));
            }
        };
        Ok(match policy.unwrap_or("cache_aware") {
            "cache_aware" => {
                let threshold = take("threshold", CACHE_THRESHOLD, false)?;
                if threshold > 1.0 {
                    return Err(parameter(format!(
                        "threshold={threshold}: a share of the prompt, at most 1"
                    )));
                }
                let abs_gap = take("abs-gap", SPILL_ABS, true)?;
                let rel_gap = take("rel-gap", SPILL_REL, true)?;
                if rel_gap < 1.0 {
                    return Err(parameter(format!(
                        "rel-gap={rel_gap}: 1.13 takes a relative threshold of at least 1"
                    )));
                }
                SmgPolicy::CacheAware {
                    threshold,
                    abs_gap,
                    rel_gap,
                }
            }
            "least_load" => SmgPolicy::LeastLoad,
            "power_of_two" => SmgPolicy::PowerOfTwo,
            "prefix_hash" => {
                let prefix_tokens = take("prefix-tokens", PREFIX_TOKENS, false)?;
                if prefix_tokens.fract() != 0.0 || prefix_tokens < 1.0 {
                    return Err(parameter(format!(
                        "prefix-tokens={prefix_tokens}: must be a whole number ≥ 1"
                    )));
                }
                let load_factor = take("load-factor", PREFIX_LOAD_FACTOR, false)?;
                if load_factor < 1.0 {
                    return Err(parameter(format!(
                        "load-factor={load_factor}: 1.13 takes a load factor of at least 1"
                    )));
                }
                SmgPolicy::PrefixHash {
                    tokenized,
                    prefix_tokens: prefix_tokens as usize,
                    load_factor,
                    abs_gap: take("abs-gap", PREFIX_ABS, true)?,
                }
            }
            "consistent_hashing" => SmgPolicy::ConsistentHashing,
            other => {
                return Err(parameter(format!(
                    "policy={other}: smg@1.13 replays cache_aware, least_load, power_of_two, prefix_hash and consistent_hashing"
                )));
            }
        })
    }

    /// The policy's name as `smg launch --policy` takes it.
    pub fn name(self) -> &'static str {
        match self {
            SmgPolicy::CacheAware { .. } => "cache_aware",
            SmgPolicy::LeastLoad => "least_load",
            SmgPolicy::PowerOfTwo => "power_of_two",
            SmgPolicy::PrefixHash { .. } => "prefix_hash",
            SmgPolicy::ConsistentHashing => "consistent_hashing",
        }
    }

    /// Every parameter, for the JSON document and the generated name.
    pub fn params(self, number: impl Fn(f64) -> Value) -> Vec<(&'static str, Value)> {
        let mut pairs = vec![
            ("release", Value::from(SMG_1_13)),
            ("policy", Value::from(self.name())),
        ];
        match self {
            SmgPolicy::CacheAware {
                threshold,
                abs_gap,
                rel_gap,
            } => pairs.extend([
                ("cache_threshold", number(threshold)),
                ("abs_gap", number(abs_gap)),
                ("rel_gap", number(rel_gap)),
            ]),
            SmgPolicy::PrefixHash {
                tokenized,
                prefix_tokens,
                load_factor,
                abs_gap,
            } => pairs.extend([
                ("tokenized", Value::Bool(tokenized)),
                ("prefix_tokens", Value::from(prefix_tokens)),
                ("load_factor", number(load_factor)),
                ("abs_gap", number(abs_gap)),
            ]),
            SmgPolicy::LeastLoad | SmgPolicy::PowerOfTwo | SmgPolicy::ConsistentHashing => {}
        }
        pairs
    }
}

/// Every flag of `smg launch` 1.13 that the replay's cache-aware rule stands
/// for: the policy and its three thresholds (the absolute one a whole
/// number of requests, as the launcher takes it), the HTTP radix tree as
/// the index, and its eviction every 60 s down to 2^26 characters, which
/// the replay's index assumes never bites.
pub fn flags(threshold: f64, abs_gap: f64, rel_gap: f64) -> String {
    format!(
        "--policy cache_aware --cache-threshold {threshold} --balance-abs-threshold {} \
         --balance-rel-threshold {rel_gap} --cache-index tree --eviction-interval-secs 60 \
         --max-tree-size {}",
        abs_gap.round(),
        1u64 << 26
    )
}
