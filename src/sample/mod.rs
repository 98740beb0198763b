//! `routeval sample`: the next labelling set, drawn from the gateway's
//! request records. Per slice, across the score range (strata of equal
//! shares of the slice's scored requests, so a threshold gets rows on both
//! sides), de-duplicated by prompt text, with secrets redacted from the
//! text and every other field of the record dropped; the record's id is
//! kept for provenance. The draw is deterministic: each record's place is a
//! hash of the seed and its id, whatever the file's order.
//!
//! Two passes over the records: the first learns each slice's score
//! quantiles, the second keeps, per slice and stratum, the records with the
//! smallest draws; memory grows with slices × strata × `--per-slice`, not
//! with the records.

use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::records::{FieldNames, Record, RecordsError, for_each_record};

#[derive(Debug, Clone)]
pub struct SampleOptions {
    pub records: PathBuf,
    pub per_slice: usize,
    /// Only records at or after this time (ms since 1970).
    pub since_ms: Option<i64>,
    /// Strata across each slice's score range; 1 draws from the slice as a
    /// whole.
    pub strata: usize,
    pub seed: u64,
    /// The rubric every sampled prompt is graded with (reference-free).
    pub rubric: String,
}

/// One row of the dataset written: what `routeval run` reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampledPrompt {
    pub id: String,
    pub slice: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<SampledMessage>>,
    pub rubric: String,
    pub record_id: String,
    pub record_timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampledMessage {
    pub role: String,
    pub content: String,
}

/// What the draw saw, per slice and overall.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleSummary {
    /// Per slice: distinct prompts eligible, prompts taken.
    pub slices: BTreeMap<String, (u64, u64)>,
    pub records: u64,
    /// Records before `--since`.
    pub too_old: u64,
    /// Records with neither a prompt nor a readable conversation.
    pub without_prompt: u64,
    /// Records whose prompt an earlier record already had.
    pub duplicates: u64,
    /// Secrets replaced by `[redacted]` in the prompts taken.
    pub redactions: u64,
}

static SECRETS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
        r"\bsk-[A-Za-z0-9_-]{16,}",
        r"\bAKIA[0-9A-Z]{16}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*",
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ]
    .iter()
    .map(|pattern| Regex::new(pattern).expect("a valid pattern"))
    .collect()
});

static ASSIGNED_SECRET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(password|passwd|api[_-]?key|secret|token)(\s*[:=]\s*)(\S+)")
        .expect("a valid pattern")
});

/// `text` with keys, tokens, private keys and assigned passwords replaced
/// by `[redacted]`, and how many were.
pub fn redact(text: &str) -> (String, u64) {
    let mut count = 0u64;
    let mut out = text.to_owned();
    for pattern in SECRETS.iter() {
        let found = pattern.find_iter(&out).count() as u64;
        if found > 0 {
            count += found;
            out = pattern.replace_all(&out, "[redacted]").into_owned();
        }
    }
    let found = ASSIGNED_SECRET
        .captures_iter(&out)
        .filter(|captures| &captures[3] != "[redacted]")
        .count() as u64;
    if found > 0 {
        count += found;
        out = ASSIGNED_SECRET
            .replace_all(&out, "${1}${2}[redacted]")
            .into_owned();
    }
    (out, count)
}

/// The conversation of a record as a dataset takes it: system, user and
/// assistant turns with text, ending with the user's; else its prompt.
fn conversation(record: &Record<'_>) -> Option<(Option<String>, Option<Vec<SampledMessage>>)> {
    if let Some(messages) = record.messages.as_deref()
        && let Ok(serde_json::Value::Array(turns)) = serde_json::from_str(messages)
    {
        let mut kept = Vec::new();
        for turn in &turns {
            let Some(role) = turn.get("role").and_then(serde_json::Value::as_str) else {
                continue;
            };
            if !matches!(role, "system" | "user" | "assistant") {
                continue;
            }
            let content = match turn.get("content") {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(serde_json::Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|part| part.get("text")?.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => continue,
            };
            if !content.trim().is_empty() {
                kept.push(SampledMessage {
                    role: role.to_owned(),
                    content,
                });
            }
        }
        if kept.last().is_some_and(|turn| turn.role == "user") {
            return Some((None, Some(kept)));
        }
    }
    record
        .prompt
        .as_deref()
        .filter(|prompt| !prompt.trim().is_empty())
        .map(|prompt| (Some(prompt.to_owned()), None))
}

fn hash_of(seed: u64, text: &str) -> u64 {
    let mut hasher = foldhash::fast::FixedState::with_seed(seed).build_hasher();
    hasher.write(text.as_bytes());
    hasher.finish()
}

/// A candidate kept in a stratum's reservoir: the smallest draws win.
#[derive(Debug, Clone, PartialEq)]
struct Candidate {
    draw: u64,
    prompt: SampledPrompt,
    redactions: u64,
}

impl Eq for Candidate {}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.draw
            .cmp(&other.draw)
            .then_with(|| self.prompt.record_id.cmp(&other.prompt.record_id))
    }
}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

fn score_bin(score: f64) -> i64 {
    (score * 100.0).floor() as i64
}

/// The prompts drawn, per slice in slice order, each slice's strata taken
/// in turn so every part of the score range is represented.
pub fn sample(
    options: &SampleOptions,
) -> Result<(Vec<SampledPrompt>, SampleSummary), RecordsError> {
    let names = FieldNames::default();
    let eligible = |record: &Record<'_>| {
        options
            .since_ms
            .is_none_or(|since| record.timestamp_ms >= since)
    };
    // Pass 1: each slice's scores, in bins of 0.01, for the strata's cuts.
    let mut histograms: BTreeMap<String, BTreeMap<i64, u64>> = BTreeMap::new();
    for_each_record(&options.records, &names, |_, record| {
        if eligible(record)
            && let Some(score) = record.score
        {
            *histograms
                .entry(record.slice.to_string())
                .or_default()
                .entry(score_bin(score))
                .or_default() += 1;
        }
        Ok(())
    })?;
    let strata = options.strata.max(1);
    let cuts: BTreeMap<String, Vec<i64>> = histograms
        .iter()
        .map(|(slice, bins)| {
            let total: u64 = bins.values().sum();
            let mut cuts = Vec::new();
            let mut seen = 0u64;
            for (bin, count) in bins {
                seen += count;
                // The bin that completes each 1/strata of the rows closes a stratum.
                while cuts.len() + 1 < strata
                    && seen * strata as u64 >= (cuts.len() as u64 + 1) * total
                {
                    cuts.push(*bin);
                }
            }
            (slice.clone(), cuts)
        })
        .collect();
    // Pass 2: per slice and stratum (the last for unscored records), the
    // records with the smallest draws.
    let mut summary = SampleSummary::default();
    let mut seen_prompts: HashSet<u64> = HashSet::new();
    let mut reservoirs: BTreeMap<String, Vec<BinaryHeap<Candidate>>> = BTreeMap::new();
    for_each_record(&options.records, &names, |_, record| {
        summary.records += 1;
        if !eligible(record) {
            summary.too_old += 1;
            return Ok(());
        }
        let Some((prompt, messages)) = conversation(record) else {
            summary.without_prompt += 1;
            return Ok(());
        };
        let text = match (&prompt, &messages) {
            (Some(prompt), _) => prompt.split_whitespace().collect::<Vec<_>>().join(" "),
            (None, Some(messages)) => serde_json::to_string(messages).expect("serialisable"),
            (None, None) => unreachable!("a conversation has one"),
        };
        if !seen_prompts.insert(hash_of(0x5eed, &text)) {
            summary.duplicates += 1;
            return Ok(());
        }
        let entry = summary.slices.entry(record.slice.to_string()).or_default();
        entry.0 += 1;
        let stratum = match (record.score, cuts.get(record.slice.as_ref())) {
            (Some(score), Some(cuts)) => cuts.partition_point(|cut| *cut < score_bin(score)),
            _ => strata,
        };
        let mut redactions = 0;
        let mut clean = |text: &str| {
            let (text, found) = redact(text);
            redactions += found;
            text
        };
        let prompt = prompt.map(|prompt| clean(&prompt));
        let messages = messages.map(|messages| {
            messages
                .into_iter()
                .map(|message| SampledMessage {
                    content: clean(&message.content),
                    role: message.role,
                })
                .collect()
        });
        let candidate = Candidate {
            redactions,
            draw: hash_of(options.seed, &record.id),
            prompt: SampledPrompt {
                id: record.id.to_string(),
                slice: record.slice.to_string(),
                prompt,
                messages,
                rubric: options.rubric.clone(),
                record_id: record.id.to_string(),
                record_timestamp: crate::clock::format_rfc3339(
                    record.timestamp_ms.div_euclid(1000),
                ),
                score: record.score,
            },
        };
        let heaps = reservoirs
            .entry(record.slice.to_string())
            .or_insert_with(|| vec![BinaryHeap::new(); strata + 1]);
        let heap = &mut heaps[stratum];
        if heap.len() < options.per_slice {
            heap.push(candidate);
        } else if heap.peek().is_some_and(|largest| candidate < *largest) {
            heap.pop();
            heap.push(candidate);
        }
        Ok(())
    })?;
    let mut prompts = Vec::new();
    for (slice, heaps) in reservoirs {
        let mut queues: Vec<std::vec::IntoIter<Candidate>> = heaps
            .into_iter()
            .map(|heap| heap.into_sorted_vec().into_iter())
            .collect();
        let mut taken = 0usize;
        'fill: while taken < options.per_slice {
            let mut any = false;
            for queue in &mut queues {
                if taken == options.per_slice {
                    break 'fill;
                }
                if let Some(candidate) = queue.next() {
                    summary.redactions += candidate.redactions;
                    prompts.push(candidate.prompt);
                    taken += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        summary.slices.entry(slice).or_default().1 = taken as u64;
    }
    Ok((prompts, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_ordinary_text_is_not() {
        let (text, count) = redact(
            "my key is sk-proj-abcdefghijklmnop1234 and password: hunter2, token=abc.def; AKIAABCDEFGHIJKLMNOP",
        );
        assert_eq!(count, 4, "{text}");
        assert!(!text.contains("hunter2") && !text.contains("sk-proj") && !text.contains("AKIA"));
        assert!(text.contains("password: [redacted]"), "{text}");
        let plain = "Where is order ORD-12345? I reset my password yesterday.";
        assert_eq!(redact(plain), (plain.to_owned(), 0));
    }
}
