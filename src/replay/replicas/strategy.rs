//! The replica-routing policies a replay compares, each a named strategy
//! with its parameters, written `NAME[:key=value,...]` on the command line.

use std::collections::BTreeMap;

use serde_json::Value;

use super::smg::{SMG_1_13, SmgPolicy};

/// SGLang's router defaults as DOMAIN.md quotes them; they have changed
/// between releases, so they are one preset (`sglang`), not truth.
pub const SGLANG_CACHE_THRESHOLD: f64 = 0.5;
pub const SGLANG_ABS_GAP: f64 = 32.0;
pub const SGLANG_REL_GAP: f64 = 1.5;

/// How a policy picks a replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Strategy {
    RoundRobin,
    /// The replica with the fewest running plus queued requests.
    LeastLoad,
    /// Affinity by session: a request continues the session of the earlier
    /// request sharing its longest leading run of blocks, when that run is
    /// at least `min_blocks` long.
    Session {
        min_blocks: usize,
    },
    /// A hash of the first `blocks` blocks picks the replica; with `bound`,
    /// consistent hashing with bounded loads moves on from a replica whose
    /// load exceeds `bound` times the mean.
    PrefixHash {
        blocks: usize,
        bound: Option<f64>,
    },
    /// SGLang-style: the load guard first, then the longest prefix match if
    /// it covers more than `threshold` of the prompt, else least load.
    CacheAware {
        threshold: f64,
        abs_gap: f64,
        rel_gap: f64,
    },
    /// A release of SGLang's router as it decides, ties included: the load
    /// guard (`most − least > abs_gap` and `most > rel_gap × least`) sends
    /// to the first least-loaded replica; else the longest prefix match,
    /// when it covers more than `threshold` of the prompt, goes to the one
    /// replica its tree keeps naming among those holding that prefix (0.2
    /// on) or the first in its node's order (0.1); else the first
    /// least-loaded replica (0.2 on) or the replica with the smallest tree
    /// in tokens (0.1).
    Sglang {
        release: SglangRelease,
        threshold: f64,
        abs_gap: f64,
        rel_gap: f64,
    },
    /// A policy of the Shepherd Model Gateway as its release 1.13 decides
    /// (`smg@1.13`, docs/replay.md).
    Smg(SmgPolicy),
    /// An endpoint-picker-style weighted sum of prefix match, queue depth and
    /// KV-cache use; the highest score wins.
    Scorer {
        prefix: f64,
        queue: f64,
        kv: f64,
    },
}

/// The releases of SGLang's router whose decisions `sglang@RELEASE`
/// reproduces; they differ in where a request below the cache threshold
/// goes, in whether the tree caches its answer, and in their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglangRelease {
    /// 0.1.x: below the threshold, the replica with the smallest tree; no
    /// cached answer at a tree node.
    V0_1,
    /// 0.2.x and 0.3.x: below the threshold, the first least-loaded replica.
    V0_3,
}

impl SglangRelease {
    pub const ALL: [SglangRelease; 2] = [SglangRelease::V0_3, SglangRelease::V0_1];

    /// The name `--policy` and `--for` take.
    pub fn name(self) -> &'static str {
        match self {
            SglangRelease::V0_1 => "sglang@0.1",
            SglangRelease::V0_3 => "sglang@0.3",
        }
    }

    pub fn from_name(name: &str) -> Option<SglangRelease> {
        SglangRelease::ALL
            .into_iter()
            .find(|release| release.name() == name)
    }

    /// The release's own defaults: cache threshold, balance absolute and
    /// relative thresholds (`launch_router --help` of 0.1.9 and 0.3.2).
    pub fn defaults(self) -> (f64, f64, f64) {
        match self {
            SglangRelease::V0_1 => (0.5, 32.0, 1.0001),
            SglangRelease::V0_3 => (0.3, 64.0, 1.5),
        }
    }

    /// Every flag of the release's launcher that the replay's rule stands
    /// for: the policy and its three thresholds, and the radix tree's
    /// eviction every 60 s down to 2^26 characters (0.3.2's defaults), which
    /// the replay's index assumes never bites. 0.1 named the interval
    /// `--eviction-interval`; 0.2 on, `--eviction-interval-secs`.
    pub fn flags(self, threshold: f64, abs_gap: f64, rel_gap: f64) -> String {
        let eviction = match self {
            SglangRelease::V0_1 => "--eviction-interval",
            SglangRelease::V0_3 => "--eviction-interval-secs",
        };
        format!(
            "--policy cache_aware --cache-threshold {threshold} --balance-abs-threshold {abs_gap} \
             --balance-rel-threshold {rel_gap} {eviction} 60 --max-tree-size {}",
            1u64 << 26
        )
    }
}

/// A router release whose cache-aware thresholds `--calibrate --for`
/// searches, against its own defaults, and whose launcher flags it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterRelease {
    Sglang(SglangRelease),
    /// The Shepherd Model Gateway 1.13 (`smg launch`).
    Smg1_13,
}

impl RouterRelease {
    pub const ALL: [RouterRelease; 3] = [
        RouterRelease::Smg1_13,
        RouterRelease::Sglang(SglangRelease::V0_3),
        RouterRelease::Sglang(SglangRelease::V0_1),
    ];

    pub fn name(self) -> &'static str {
        match self {
            RouterRelease::Sglang(release) => release.name(),
            RouterRelease::Smg1_13 => SMG_1_13,
        }
    }

    pub fn from_name(name: &str) -> Option<RouterRelease> {
        RouterRelease::ALL
            .into_iter()
            .find(|release| release.name() == name)
    }

    /// The release's cache-aware rule at these thresholds.
    pub fn policy(self, threshold: f64, abs_gap: f64, rel_gap: f64) -> PolicySpec {
        match self {
            RouterRelease::Sglang(release) => {
                PolicySpec::sglang(release, threshold, abs_gap, rel_gap)
            }
            RouterRelease::Smg1_13 => {
                let strategy = Strategy::Smg(SmgPolicy::CacheAware {
                    threshold,
                    abs_gap,
                    rel_gap,
                });
                PolicySpec {
                    name: describe(SMG_1_13, &strategy_params(&strategy)),
                    strategy,
                    count_dispatched: false,
                }
            }
        }
    }

    /// Every launcher flag the cache-aware rule at these thresholds needs.
    pub fn flags(self, threshold: f64, abs_gap: f64, rel_gap: f64) -> String {
        match self {
            RouterRelease::Sglang(release) => release.flags(threshold, abs_gap, rel_gap),
            RouterRelease::Smg1_13 => super::smg::flags(threshold, abs_gap, rel_gap),
        }
    }
}

/// A strategy, the name it was asked for by, and how the router sees load.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    pub name: String,
    pub strategy: Strategy,
    /// Add the requests the router dispatched since the last metrics scrape
    /// to the scraped load, so bursts do not overrun a stale signal.
    pub count_dispatched: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    #[error(
        "unknown policy {name:?}; known: round-robin, least-load, session, prefix-hash, cache-aware, sglang, sglang@0.3, sglang@0.1, smg@1.13, scorer"
    )]
    Unknown { given: String, name: String },
    #[error("{problem}")]
    Parameter { given: String, problem: String },
}

impl PolicySpec {
    /// The policies a replay compares when none is named.
    pub fn defaults(scraped: bool) -> Vec<PolicySpec> {
        let mut names = vec![
            "round-robin",
            "least-load",
            "session",
            "prefix-hash",
            "prefix-hash:bound=1.25",
            "cache-aware:abs-gap=inf",
            "sglang",
            "scorer",
        ];
        if scraped {
            names.extend([
                "least-load:count-dispatched=true",
                "sglang:count-dispatched=true",
            ]);
        }
        names
            .into_iter()
            .map(|name| PolicySpec::parse(name).expect("the defaults parse"))
            .collect()
    }

    pub fn cache_aware(threshold: f64, abs_gap: f64, rel_gap: f64) -> PolicySpec {
        let strategy = Strategy::CacheAware {
            threshold,
            abs_gap,
            rel_gap,
        };
        PolicySpec {
            name: describe("cache-aware", &strategy_params(&strategy)),
            strategy,
            count_dispatched: false,
        }
    }

    pub fn sglang(
        release: SglangRelease,
        threshold: f64,
        abs_gap: f64,
        rel_gap: f64,
    ) -> PolicySpec {
        let strategy = Strategy::Sglang {
            release,
            threshold,
            abs_gap,
            rel_gap,
        };
        PolicySpec {
            name: describe(release.name(), &strategy_params(&strategy)),
            strategy,
            count_dispatched: false,
        }
    }

    pub fn scorer(prefix: f64, queue: f64, kv: f64) -> PolicySpec {
        let strategy = Strategy::Scorer { prefix, queue, kv };
        PolicySpec {
            name: describe("scorer", &strategy_params(&strategy)),
            strategy,
            count_dispatched: false,
        }
    }

    /// `NAME[:key=value,...]`.
    pub fn parse(given: &str) -> Result<PolicySpec, PolicyError> {
        let (name, rest) = given.split_once(':').unwrap_or((given, ""));
        let parameter = |problem: String| PolicyError::Parameter {
            given: given.to_owned(),
            problem,
        };
        let mut values = key_values(given, rest)?;
        // The only parameter that is a name, not a number.
        let smg_words = if name == SMG_1_13 {
            (values.remove("policy"), values.remove("tokenized"))
        } else {
            (None, None)
        };
        let count_dispatched = match values.remove("count-dispatched") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(parameter(format!(
                    "count-dispatched={other}: expected true or false"
                )));
            }
        };
        let mut take = |key: &str, default: f64, allow_inf: bool| {
            take_number(&mut values, given, key, default, allow_inf)
        };
        let whole = |value: f64, key: &str| whole_number(given, value, key);
        let strategy = match name {
            "round-robin" => Strategy::RoundRobin,
            "least-load" => Strategy::LeastLoad,
            "session" => Strategy::Session {
                min_blocks: whole(take("min-blocks", 2.0, false)?, "min-blocks")?,
            },
            "prefix-hash" => {
                let blocks = whole(take("blocks", 2.0, false)?, "blocks")?;
                let bound = take("bound", f64::INFINITY, true)?;
                if bound < 1.0 {
                    return Err(parameter(format!("bound={bound}: must be at least 1")));
                }
                Strategy::PrefixHash {
                    blocks,
                    bound: bound.is_finite().then_some(bound),
                }
            }
            "cache-aware" | "sglang" => {
                let (threshold, abs_gap, rel_gap) = guard_and_threshold(
                    given,
                    &mut take,
                    (SGLANG_CACHE_THRESHOLD, SGLANG_ABS_GAP, SGLANG_REL_GAP),
                )?;
                Strategy::CacheAware {
                    threshold,
                    abs_gap,
                    rel_gap,
                }
            }
            release if SglangRelease::from_name(release).is_some() => {
                let release = SglangRelease::from_name(release).expect("matched");
                let (threshold, abs_gap, rel_gap) =
                    guard_and_threshold(given, &mut take, release.defaults())?;
                Strategy::Sglang {
                    release,
                    threshold,
                    abs_gap,
                    rel_gap,
                }
            }
            SMG_1_13 => Strategy::Smg(SmgPolicy::parse(smg_words, &mut take, parameter)?),
            "scorer" => scorer_weights(&mut take, parameter)?,
            _ => {
                return Err(PolicyError::Unknown {
                    given: given.to_owned(),
                    name: name.to_owned(),
                });
            }
        };
        if let Some(key) = values.keys().next() {
            return Err(parameter(format!("{name} takes no parameter {key:?}")));
        }
        Ok(PolicySpec {
            name: given.to_owned(),
            strategy,
            count_dispatched,
        })
    }

    /// Every parameter, defaults included, for the JSON document.
    pub fn params(&self) -> BTreeMap<String, Value> {
        let mut params = strategy_params(&self.strategy);
        params.insert(
            "count_dispatched".to_owned(),
            Value::Bool(self.count_dispatched),
        );
        params
    }
}

/// The scorer's three weights, not all zero.
fn scorer_weights(
    take: &mut impl FnMut(&str, f64, bool) -> Result<f64, PolicyError>,
    parameter: impl Fn(String) -> PolicyError,
) -> Result<Strategy, PolicyError> {
    let (prefix, queue, kv) = (
        take("prefix", 3.0, false)?,
        take("queue", 2.0, false)?,
        take("kv", 2.0, false)?,
    );
    if prefix == 0.0 && queue == 0.0 && kv == 0.0 {
        return Err(parameter("every weight is zero".to_owned()));
    }
    Ok(Strategy::Scorer { prefix, queue, kv })
}

/// A cache-aware rule's `threshold`, `abs-gap` and `rel-gap`, each its
/// default unless given; the threshold is a share of the prompt.
fn guard_and_threshold(
    given: &str,
    take: &mut impl FnMut(&str, f64, bool) -> Result<f64, PolicyError>,
    (threshold, abs_gap, rel_gap): (f64, f64, f64),
) -> Result<(f64, f64, f64), PolicyError> {
    let threshold = take("threshold", threshold, false)?;
    if threshold > 1.0 {
        return Err(PolicyError::Parameter {
            given: given.to_owned(),
            problem: format!("threshold={threshold}: a share of the prompt, at most 1"),
        });
    }
    Ok((
        threshold,
        take("abs-gap", abs_gap, true)?,
        take("rel-gap", rel_gap, true)?,
    ))
}

fn number(value: f64) -> Value {
    if value.is_finite() {
        serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
    } else {
        Value::String("inf".to_owned())
    }
}

fn strategy_params(strategy: &Strategy) -> BTreeMap<String, Value> {
    let pairs: Vec<(&str, Value)> = match *strategy {
        Strategy::RoundRobin | Strategy::LeastLoad => vec![],
        Strategy::Session { min_blocks } => vec![("min_blocks", Value::from(min_blocks))],
        Strategy::PrefixHash { blocks, bound } => vec![
            ("blocks", Value::from(blocks)),
            ("bound", bound.map_or(Value::Null, number)),
        ],
        Strategy::CacheAware {
            threshold,
            abs_gap,
            rel_gap,
        } => vec![
            ("cache_threshold", number(threshold)),
            ("abs_gap", number(abs_gap)),
            ("rel_gap", number(rel_gap)),
        ],
        Strategy::Sglang {
            release,
            threshold,
            abs_gap,
            rel_gap,
        } => vec![
            ("release", Value::from(release.name())),
            ("cache_threshold", number(threshold)),
            ("abs_gap", number(abs_gap)),
            ("rel_gap", number(rel_gap)),
        ],
        Strategy::Smg(policy) => policy.params(number),
        Strategy::Scorer { prefix, queue, kv } => vec![
            ("prefix_weight", number(prefix)),
            ("queue_weight", number(queue)),
            ("kv_weight", number(kv)),
        ],
    };
    pairs
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
}

/// `name:key=value,...` from the JSON parameters, as a user would type it.
fn describe(name: &str, params: &BTreeMap<String, Value>) -> String {
    let flag = |key: &str| match key {
        "cache_threshold" => "threshold".to_owned(),
        other => other.trim_end_matches("_weight").replace('_', "-"),
    };
    let pairs: Vec<String> = params
        .iter()
        .filter(|(key, value)| {
            key.as_str() != "release" && !(key.as_str() == "policy" && *value == "cache_aware")
        })
        .map(|(key, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                Value::Number(number) => {
                    number.as_f64().map_or_else(String::new, |n| n.to_string())
                }
                other => other.to_string(),
            };
            format!("{}={text}", flag(key))
        })
        .collect();
    format!("{name}:{}", pairs.join(","))
}

/// The `key=value` pairs of a policy's parameters, each key once.
fn key_values<'a>(given: &str, rest: &'a str) -> Result<BTreeMap<&'a str, &'a str>, PolicyError> {
    let parameter = |problem: String| PolicyError::Parameter {
        given: given.to_owned(),
        problem,
    };
    let mut values = BTreeMap::new();
    for pair in rest.split(',').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| parameter(format!("expected key=value, found {pair:?}")))?;
        if values.insert(key.trim(), value.trim()).is_some() {
            return Err(parameter(format!("{key} given twice")));
        }
    }
    Ok(values)
}

/// Parameter `key`, taken out of `values`: a non-negative number (or `inf`
/// where `allow_inf`), `default` when not given.
fn take_number(
    values: &mut BTreeMap<&str, &str>,
    given: &str,
    key: &str,
    default: f64,
    allow_inf: bool,
) -> Result<f64, PolicyError> {
    let parameter = |problem: String| PolicyError::Parameter {
        given: given.to_owned(),
        problem,
    };
    let Some(text) = values.remove(key) else {
        return Ok(default);
    };
    let value = if text == "inf" {
        f64::INFINITY
    } else {
        text.parse::<f64>()
            .map_err(|_| parameter(format!("{key}={text}: not a number")))?
    };
    if value.is_nan() || value < 0.0 || (value.is_infinite() && !allow_inf) {
        return Err(parameter(format!(
            "{key}={text}: must be a non-negative number{}",
            if allow_inf { " or inf" } else { "" }
        )));
    }
    Ok(value)
}

/// A parameter that counts something: a whole number of at least 1.
fn whole_number(given: &str, value: f64, key: &str) -> Result<usize, PolicyError> {
    if value.fract() != 0.0 || value < 1.0 {
        return Err(PolicyError::Parameter {
            given: given.to_owned(),
            problem: format!("{key}={value}: must be a whole number ≥ 1"),
        });
    }
    Ok(value as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sglang_release_has_its_own_defaults() {
        for (name, release, threshold, abs_gap, rel_gap) in [
            ("sglang@0.3", SglangRelease::V0_3, 0.3, 64.0, 1.5),
            ("sglang@0.1", SglangRelease::V0_1, 0.5, 32.0, 1.0001),
        ] {
            assert_eq!(
                PolicySpec::parse(name).unwrap().strategy,
                Strategy::Sglang {
                    release,
                    threshold,
                    abs_gap,
                    rel_gap
                }
            );
        }
        assert_eq!(
            PolicySpec::parse("sglang@0.3:abs-gap=16").unwrap().strategy,
            Strategy::Sglang {
                release: SglangRelease::V0_3,
                threshold: 0.3,
                abs_gap: 16.0,
                rel_gap: 1.5
            }
        );
        assert!(matches!(
            PolicySpec::parse("sglang@0.2"),
            Err(PolicyError::Unknown { .. })
        ));
    }

    #[test]
    fn the_sglang_preset_is_cache_aware_with_its_defaults() {
        let preset = PolicySpec::parse("sglang").unwrap();
        assert_eq!(
            preset.strategy,
            Strategy::CacheAware {
                threshold: 0.5,
                abs_gap: 32.0,
                rel_gap: 1.5
            }
        );
        assert_eq!(
            PolicySpec::parse("cache-aware:abs-gap=inf")
                .unwrap()
                .strategy,
            Strategy::CacheAware {
                threshold: 0.5,
                abs_gap: f64::INFINITY,
                rel_gap: 1.5
            }
        );
    }

    #[test]
    fn a_generated_name_parses_back_to_its_policy() {
        let policy = PolicySpec::cache_aware(0.7, 16.0, 1.25);
        assert_eq!(
            policy.name,
            "cache-aware:abs-gap=16,threshold=0.7,rel-gap=1.25"
        );
        assert_eq!(
            PolicySpec::parse(&policy.name).unwrap().strategy,
            policy.strategy
        );
        let scorer = PolicySpec::scorer(1.0, 0.0, 4.0);
        assert_eq!(
            PolicySpec::parse(&scorer.name).unwrap().strategy,
            scorer.strategy
        );
    }

    #[test]
    fn bad_policies_name_the_parameter() {
        let cases = [
            ("fastest", "unknown policy \"fastest\""),
            ("sglang:threshold=2", "threshold=2: a share of the prompt"),
            (
                "session:min-blocks=0",
                "min-blocks=0: must be a whole number",
            ),
            (
                "round-robin:blocks=2",
                "round-robin takes no parameter \"blocks\"",
            ),
            ("scorer:prefix=0,queue=0,kv=0", "every weight is zero"),
            ("least-load:count-dispatched=yes", "expected true or false"),
            ("prefix-hash:bound=0.5", "must be at least 1"),
        ];
        for (given, expected) in cases {
            let error = PolicySpec::parse(given).unwrap_err().to_string();
            assert!(error.contains(expected), "{given}: {error}");
        }
    }
}
