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
//!
//! With `--audit N` it draws instead the graded rows a human should audit
//! (`audit`); with `--label-share Q`, the served decisions whose logged
//! answers a person or a judge labels for `replay candidate` (`labels`).

mod audit;
mod labels;
mod written;

pub use audit::{AuditOptions, draw_audits};
pub use labels::{LabelCounts, draw_labels};
pub use written::{SampleRequest, draw_into};

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

use serde::Serialize;

use crate::records::{FieldNames, Record, for_each_record, redact};
use crate::schema::InputError;

#[derive(Debug, Clone, PartialEq)]
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

/// What `sample --out` writes: JSON lines, each with the record it came from.
pub const SAMPLE_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a sampled labelling set",
    crate::atomic::Replaces::Lines(&["id", "record_id", "slice", "rubric"]),
);

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
        .prompt_text()
        .filter(|prompt| !prompt.trim().is_empty())
        .map(|prompt| (Some(prompt.into_owned()), None))
}

/// What makes two records' prompts the same: the prompt with its spacing
/// folded, else the conversation.
fn prompt_key((prompt, messages): &(Option<String>, Option<Vec<SampledMessage>>)) -> u64 {
    let text = match (prompt, messages) {
        (Some(prompt), _) => prompt.split_whitespace().collect::<Vec<_>>().join(" "),
        (None, Some(messages)) => serde_json::to_string(messages).expect("serialisable"),
        (None, None) => String::new(),
    };
    hash_of(0x5eed, &text)
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
pub fn sample(options: &SampleOptions) -> Result<(Vec<SampledPrompt>, SampleSummary), InputError> {
    let names = FieldNames::default();
    let eligible = |record: &Record<'_>| {
        options
            .since_ms
            .is_none_or(|since| record.timestamp_ms >= since)
    };
    // Pass 1: each slice's scores, in bins of 0.01, for the strata's cuts.
    let mut histograms: BTreeMap<String, BTreeMap<i64, u64>> = BTreeMap::new();
    // A repeated id would become a repeated dataset id, which `run` refuses.
    let mut ids = crate::records::UniqueIds::default();
    for_each_record(&options.records, &names, |location, record| {
        ids.check(&options.records, location, &record.id, "id")?;
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
    let cuts = stratum_cuts(&histograms, strata);
    // Pass 2: of the records sharing a prompt, the one with the smallest
    // draw is the one kept, whatever the order of the file.
    let mut winners: HashMap<u64, u64> = HashMap::new();
    for_each_record(&options.records, &names, |_, record| {
        if eligible(record)
            && let Some(key) = conversation(record).map(|conversation| prompt_key(&conversation))
        {
            let draw = hash_of(options.seed, &record.id);
            winners
                .entry(key)
                .and_modify(|best| *best = (*best).min(draw))
                .or_insert(draw);
        }
        Ok(())
    })?;
    // Pass 3: per slice and stratum (the last for unscored records), the
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
        let key = prompt_key(&(prompt.clone(), messages.clone()));
        let draw = hash_of(options.seed, &record.id);
        // Another record of this prompt won the draw, or (a repeated id)
        // this one was already taken.
        if winners.get(&key) != Some(&draw) || !seen_prompts.insert(key) {
            summary.duplicates += 1;
            return Ok(());
        }
        let entry = summary.slices.entry(record.slice.to_string()).or_default();
        entry.0 += 1;
        let stratum = match (record.score, cuts.get(record.slice.as_ref())) {
            (Some(score), Some(cuts)) => cuts.partition_point(|cut| *cut < score_bin(score)),
            _ => strata,
        };
        let candidate = candidate(record, prompt, messages, draw, &options.rubric);
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
    let prompts = take_in_turn(reservoirs, options.per_slice, &mut summary);
    // Records read, none of them with a prompt: a draw of nothing is not
    // a labelling set.
    if prompts.is_empty() && summary.without_prompt > 0 && summary.duplicates == 0 {
        return Err(InputError::Empty {
            path: options.records.clone(),
            nothing: "no record keeps its prompt or messages (serve with --records-prompts none keeps neither): nothing to sample; run serve with --records-prompts full or redacted",
        });
    }
    Ok((prompts, summary))
}

/// Per slice, the score bins closing each stratum of equal shares.
fn stratum_cuts(
    histograms: &BTreeMap<String, BTreeMap<i64, u64>>,
    strata: usize,
) -> BTreeMap<String, Vec<i64>> {
    histograms
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
        .collect()
}

/// A record's prompt as a candidate for the draw, its secrets redacted.
fn candidate(
    record: &Record<'_>,
    prompt: Option<String>,
    messages: Option<Vec<SampledMessage>>,
    draw: u64,
    rubric: &str,
) -> Candidate {
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
    Candidate {
        redactions,
        draw,
        prompt: SampledPrompt {
            id: record.id.to_string(),
            slice: record.slice.to_string(),
            prompt,
            messages,
            rubric: rubric.to_owned(),
            record_id: record.id.to_string(),
            record_timestamp: crate::clock::format_rfc3339(record.timestamp_ms.div_euclid(1000)),
            score: record.score,
        },
    }
}

/// Each slice's `per_slice` prompts, taken from its strata in turn, the
/// smallest draws first.
fn take_in_turn(
    reservoirs: BTreeMap<String, Vec<BinaryHeap<Candidate>>>,
    per_slice: usize,
    summary: &mut SampleSummary,
) -> Vec<SampledPrompt> {
    let mut prompts = Vec::new();
    for (slice, heaps) in reservoirs {
        let mut queues: Vec<std::vec::IntoIter<Candidate>> = heaps
            .into_iter()
            .map(|heap| heap.into_sorted_vec().into_iter())
            .collect();
        let mut taken = 0usize;
        'fill: while taken < per_slice {
            let mut any = false;
            for queue in &mut queues {
                if taken == per_slice {
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
    prompts
}
