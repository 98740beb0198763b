//! `replay replicas --policy smg@1.13` against the real Shepherd Model
//! Gateway (PyPI `smg` 1.13.0, which `.ci/run` installs) in front of the
//! same fake workers as the SGLang router's test: the replay's cache hit
//! rate and busiest replica's share agree with what the gateway did under
//! load, one request at a time (where 1.13 draws among idle workers) and on
//! a hot shared document with the spill gate engaged; its prefix_hash over
//! HTTP hashes nothing; and what `--calibrate --for smg@1.13` prints starts
//! the real launcher.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::router_drive::{
    Drive, FAST_PREFILL_TOKENS_PER_S, Outcome, PREFILL_TOKENS_PER_S, agree, calibrated_flags_start,
    conversation_rows, hot_document_rows, one_token_each, replay, write_trace,
};
use crate::common::{data_dir, python_named_by};

/// One comparison. 1.13 draws among equally loaded workers, so both sides
/// are averaged: the gateway over `runs` drives, the replay over `seeds`
/// seeds (a seed's replay is cheap, a drive is not).
struct Case {
    name: &'static str,
    runs: usize,
    seeds: u64,
    rows: Vec<Value>,
    mode: &'static str,
    prefill_tokens_per_s: f64,
    flags: &'static [&'static str],
    policy: &'static str,
    /// The old router's release at the same settings: what a team replaying
    /// `sglang@0.3` would have been told about the gateway it runs now.
    old: &'static str,
}

fn cases(data: &Path) -> Vec<Case> {
    vec![
        Case {
            name: "under load, 1.13's defaults",
            runs: 4,
            seeds: 8,
            rows: conversation_rows(data, 600, 22),
            mode: "load",
            prefill_tokens_per_s: PREFILL_TOKENS_PER_S,
            flags: &[],
            policy: "smg@1.13",
            old: "sglang@0.3",
        },
        Case {
            name: "one request at a time",
            runs: 4,
            seeds: 16,
            rows: one_token_each(conversation_rows(data, 400, 10_000)),
            mode: "one-at-a-time",
            prefill_tokens_per_s: FAST_PREFILL_TOKENS_PER_S,
            flags: &[],
            policy: "smg@1.13",
            old: "sglang@0.3",
        },
        Case {
            // At 4 the gate spreads the document over every worker whatever
            // the timing. At 8 or 16 a drive lands in one of two regimes
            // (two holders, busiest 0.403, or four, about 0.30), by timing
            // and tie draws, on the gateway and in the replay alike; their
            // mixture moves with the machine's load (docs/replay.md).
            name: "a hot document, the spill gate at 4",
            runs: 2,
            seeds: 8,
            rows: hot_document_rows(),
            mode: "load",
            prefill_tokens_per_s: PREFILL_TOKENS_PER_S,
            flags: &["--balance-abs-threshold", "4"],
            policy: "smg@1.13:abs-gap=4",
            old: "sglang@0.3:abs-gap=4",
        },
        Case {
            // Over HTTP 1.13's prefix_hash is handed nothing to hash: every
            // request goes to the first idle worker, a hit rate routeval's
            // own prefix-hash (which hashes the blocks) does not show.
            name: "prefix_hash over HTTP",
            runs: 1,
            seeds: 1,
            rows: one_token_each(conversation_rows(data, 400, 10_000)),
            mode: "one-at-a-time",
            prefill_tokens_per_s: FAST_PREFILL_TOKENS_PER_S,
            flags: &["--policy", "prefix_hash"],
            policy: "smg@1.13:policy=prefix_hash",
            old: "prefix-hash",
        },
    ]
}

#[test]
fn the_replay_reproduces_the_real_smg_1_13() {
    let Some(data) = data_dir("the real smg's replay") else {
        return;
    };
    let Some(python) = python_named_by("ROUTEVAL_TEST_SMG_PYTHON", "the real smg's replay") else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(360);
    let directory = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in cases(&data) {
        let trace = directory
            .path()
            .join(format!("{}.jsonl", case.name.replace(' ', "-")));
        write_trace(&trace, &case.rows);
        let drive = Drive {
            python: &python,
            router: "smg",
            mode: case.mode,
            prefill_tokens_per_s: case.prefill_tokens_per_s,
            flags: case.flags,
        };
        let real = Outcome::mean(
            &(0..case.runs)
                .map(|_| drive.run(&trace, deadline))
                .collect::<Vec<_>>(),
        );
        let replayed = Outcome::mean(
            &(0..case.seeds)
                .map(|seed| replay(&trace, case.prefill_tokens_per_s, case.policy, seed))
                .collect::<Vec<_>>(),
        );
        let old = replay(&trace, case.prefill_tokens_per_s, case.old, 0);
        eprintln!(
            "{}: smg hit rate {:.4}, busiest {:.3} (last run {:?}); replay {:.4}, {:.3} (last seed {:?}); {} {:.4}, {:.3}",
            case.name,
            real.hit_rate,
            real.busiest_share,
            real.replica_requests,
            replayed.hit_rate,
            replayed.busiest_share,
            replayed.replica_requests,
            case.old,
            old.hit_rate,
            old.busiest_share,
        );
        if !agree(&real, &replayed) {
            failures.push((case.name, real, replayed));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // What `--calibrate --for smg@1.13` hands the gateway starts it.
    calibrated_flags_start(
        &python,
        "smg",
        (
            "smg@1.13",
            &[
                "--policy cache_aware",
                "--cache-threshold",
                "--balance-abs-threshold",
                "--balance-rel-threshold",
                "--cache-index tree",
                "--eviction-interval-secs 60",
                "--max-tree-size 67108864",
            ],
        ),
        &data,
        directory.path(),
        deadline,
    );
}
