//! `replay replicas --policy sglang@0.3` against the real SGLang router
//! (PyPI `sglang-router` 0.3.2, which `.ci/run` installs) in front of fake
//! workers on loopback that serve each request as the replay's pool model
//! does: the replay's cache hit rate and busiest replica's share agree with
//! what the router did, under load, one request at a time (where every tie
//! goes to the router's first worker) and on a hot shared document with the
//! load guard engaged (where the router keeps naming one holder).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::router_drive::{
    Drive, Outcome, PREFILL_TOKENS_PER_S, agree, calibrated_flags_start, conversation_rows,
    hot_document_rows, one_token_each, replay, write_trace,
};
use crate::common::{data_dir, python_named_by};

/// The replay at the pool's one seed: sglang@0.3 draws nothing.
fn replay_at_seed_0(trace: &std::path::Path, policy: &str) -> Outcome {
    replay(trace, PREFILL_TOKENS_PER_S, policy, 0)
}

/// One comparison: its rows, how they are sent (`load` or
/// `one-at-a-time`), the router's flags, the release's policy, and
/// routeval's own cache-aware variant at the same settings, to show where
/// the two differ.
struct Case {
    name: &'static str,
    /// Runs of the real router, averaged: under load its own timing moves
    /// its busiest share from run to run (0.308 to 0.347 in eight single
    /// runs of the first case, mean 0.339, where the replay gives 0.330),
    /// and the replay answers for its mean.
    runs: usize,
    rows: Vec<Value>,
    mode: &'static str,
    flags: &'static [&'static str],
    policy: &'static str,
    own: &'static str,
}

#[test]
fn the_replay_reproduces_the_real_sglang_router() {
    let Some(data) = data_dir("the real SGLang router's replay") else {
        return;
    };
    let Some(python) = python_named_by(
        "ROUTEVAL_TEST_SGLANG_PYTHON",
        "the real SGLang router's replay",
    ) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let directory = tempfile::tempdir().unwrap();
    let cases = [
        Case {
            name: "under load, 0.3.2's defaults",
            runs: 4,
            rows: conversation_rows(&data, 600, 22),
            mode: "load",
            flags: &[],
            policy: "sglang@0.3",
            own: "cache-aware:threshold=0.3,abs-gap=64",
        },
        Case {
            name: "one request at a time",
            runs: 1,
            // One output token each, so the case takes seconds, not minutes.
            rows: one_token_each(conversation_rows(&data, 80, 10_000)),
            mode: "one-at-a-time",
            flags: &[],
            policy: "sglang@0.3",
            own: "cache-aware:threshold=0.3,abs-gap=64",
        },
        Case {
            name: "a hot document, the load guard at 16",
            runs: 1,
            rows: hot_document_rows(),
            mode: "load",
            flags: &["--balance-abs-threshold", "16"],
            policy: "sglang@0.3:abs-gap=16",
            own: "cache-aware:threshold=0.3,abs-gap=16",
        },
    ];
    let mut failures = Vec::new();
    for Case {
        name: case,
        runs,
        rows,
        mode,
        flags,
        policy,
        own,
    } in cases
    {
        let trace = directory
            .path()
            .join(format!("{}.jsonl", case.replace(' ', "-")));
        write_trace(&trace, &rows);
        let drive = Drive {
            python: &python,
            router: "sglang-router",
            mode,
            prefill_tokens_per_s: PREFILL_TOKENS_PER_S,
            flags,
        };
        let each: Vec<Outcome> = (0..runs).map(|_| drive.run(&trace, deadline)).collect();
        let real = Outcome::mean(&each);
        let replayed = replay_at_seed_0(&trace, policy);
        let own = replay_at_seed_0(&trace, own);
        eprintln!(
            "{case}: router hit rate {:.4}, busiest {:.3} (last run {:?}); replay {:.4}, {:.3} {:?}; cache-aware {:.4}, {:.3}",
            real.hit_rate,
            real.busiest_share,
            real.replica_requests,
            replayed.hit_rate,
            replayed.busiest_share,
            replayed.replica_requests,
            own.hit_rate,
            own.busiest_share,
        );
        if !agree(&real, &replayed) {
            failures.push((case, real, replayed));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // What `--calibrate --for sglang@0.3` hands the router starts it.
    calibrated_flags_start(
        &python,
        "sglang-router",
        (
            "sglang@0.3",
            &[
                "--policy cache_aware",
                "--cache-threshold",
                "--balance-abs-threshold",
                "--balance-rel-threshold",
                "--eviction-interval-secs 60",
                "--max-tree-size 67108864",
            ],
        ),
        &data,
        directory.path(),
        deadline,
    );
}
