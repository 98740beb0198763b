//! Where `smg@1.13` sends a request: the Shepherd Model Gateway 1.13's
//! choices (docs in [`super::smg`]) made on the simulated pool.

use super::pool::Simulation;
use super::smg::{RING_NODES_PER_WORKER, SPILL_MARGIN_FLOOR, SmgPolicy};
use crate::replay::trace::Request;

impl Simulation {
    /// Where 1.13 sends `request` under `policy`, and the blocks the router
    /// expects cached there when its tree chose it.
    pub(super) fn smg_route(&mut self, policy: SmgPolicy, request: &Request) -> (usize, usize) {
        let count = self.replicas.len();
        let everyone: Vec<usize> = (0..count).collect();
        match policy {
            SmgPolicy::CacheAware {
                threshold,
                abs_gap,
                rel_gap,
            } => self.smg_cache_aware(request, threshold, abs_gap, rel_gap),
            SmgPolicy::LeastLoad => (self.drawn_least_loaded(&everyone), 0),
            SmgPolicy::PowerOfTwo => {
                if count == 1 {
                    return (0, 0);
                }
                let first = (self.random.next_u64() % count as u64) as usize;
                let offset = 1 + (self.random.next_u64() % (count as u64 - 1)) as usize;
                let pair = [first, (first + offset) % count];
                (self.drawn_least_loaded(&pair), 0)
            }
            SmgPolicy::PrefixHash {
                tokenized: false, ..
            } => (first_least(&self.loads()), 0),
            SmgPolicy::PrefixHash {
                tokenized: true,
                prefix_tokens,
                load_factor,
                abs_gap,
            } => (
                self.smg_prefix_hash(request, prefix_tokens, load_factor, abs_gap),
                0,
            ),
            SmgPolicy::ConsistentHashing => ((self.random.next_u64() % count as u64) as usize, 0),
        }
    }

    fn smg_cache_aware(
        &mut self,
        request: &Request,
        threshold: f64,
        abs_gap: f64,
        rel_gap: f64,
    ) -> (usize, usize) {
        let count = self.replicas.len();
        let loads = self.loads();
        let mean = loads.iter().sum::<f64>() / count as f64;
        // The absolute margin is capped at two standard deviations of an
        // in-flight count at this mean, never under four, so a small pool
        // can spill at all.
        let margin = abs_gap.min((2.0 * mean.sqrt()).max(SPILL_MARGIN_FLOOR));
        let gated = |index: usize| loads[index] > mean * rel_gap && loads[index] > mean + margin;
        let matches: Vec<usize> = self
            .replicas
            .iter()
            .map(|replica| replica.index.leading_matches(&request.blocks))
            .collect();
        let longest = matches.iter().copied().max().unwrap_or(0);
        // 1.13 compares the ratio in single precision.
        let ratio = self.covered(request, longest) as f32;
        if longest == 0 || ratio <= threshold as f32 {
            let everyone: Vec<usize> = (0..count).collect();
            return (self.drawn_least_loaded(&everyone), 0);
        }
        let holders: Vec<usize> = (0..count).filter(|&i| matches[i] == longest).collect();
        let open_holders: Vec<usize> = holders.iter().copied().filter(|&i| !gated(i)).collect();
        if !open_holders.is_empty() {
            return (self.drawn_least_loaded(&open_holders), longest);
        }
        let ungated: Vec<usize> = (0..count).filter(|&i| !gated(i)).collect();
        let candidates = if ungated.is_empty() {
            (0..count).collect()
        } else {
            ungated
        };
        let target = self.drawn_least_loaded(&candidates);
        (
            target,
            if holders.contains(&target) {
                longest
            } else {
                0
            },
        )
    }

    fn smg_prefix_hash(
        &mut self,
        request: &Request,
        prefix_tokens: usize,
        load_factor: f64,
        abs_gap: f64,
    ) -> usize {
        let count = self.replicas.len();
        let blocks = prefix_tokens
            .div_ceil(self.pool.block_tokens as usize)
            .min(request.blocks.len());
        let hash = foldhash::fast::FixedState::with_seed(self.pool.seed);
        let key = std::hash::BuildHasher::hash_one(&hash, &request.blocks[..blocks]);
        if self.ring.is_empty() {
            self.ring = (0..count)
                .flat_map(|replica| {
                    (0..RING_NODES_PER_WORKER).map(move |node| {
                        let point = crate::stats::random::splitmix64(
                            (replica as u64).wrapping_mul(0x9e37_79b9) ^ node as u64,
                        );
                        (point, replica as u32)
                    })
                })
                .collect();
            self.ring.sort_unstable();
        }
        let position = self.ring.partition_point(|&(point, _)| point < key) % self.ring.len();
        let initial = self.ring[position].1 as usize;
        let loads = self.loads();
        let total: f64 = loads.iter().sum();
        if total == 0.0 {
            return initial;
        }
        let mean = (total + 1.0) / count as f64;
        let ceiling = (mean * load_factor).max(mean + abs_gap);
        if loads[initial] <= ceiling {
            return initial;
        }
        (0..count)
            .filter(|&index| loads[index] <= ceiling)
            .min_by(|&a, &b| loads[a].total_cmp(&loads[b]))
            .unwrap_or(initial)
    }

    /// Every replica's load as the router sees it.
    fn loads(&self) -> Vec<f64> {
        (0..self.replicas.len())
            .map(|index| f64::from(self.seen_load(index)))
            .collect()
    }

    /// The fewest in flight among `candidates`, equal counts drawn
    /// uniformly, as 1.13's expected-wait selection does for a fleet that
    /// reports no load.
    fn drawn_least_loaded(&mut self, candidates: &[usize]) -> usize {
        let mut best = candidates[0];
        let mut best_load = self.seen_load(best);
        let mut tied = 1u64;
        for &index in &candidates[1..] {
            let load = self.seen_load(index);
            if load < best_load {
                (best, best_load, tied) = (index, load, 1);
            } else if load == best_load {
                tied += 1;
                if self.random.next_u64().is_multiple_of(tied) {
                    best = index;
                }
            }
        }
        best
    }
}

/// The first position of the smallest load, as `min_by_key` over the
/// gateway's worker list finds it.
fn first_least(loads: &[f64]) -> usize {
    let mut best = 0;
    for (index, &load) in loads.iter().enumerate() {
        if load < loads[best] {
            best = index;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use crate::replay::replicas::pool::tests::{request, served_with_seed as served};
    use crate::replay::replicas::strategy::PolicySpec;
    use crate::replay::trace::Request;

    #[test]
    fn with_no_load_smg_draws_among_the_idle_where_sglang_took_the_first() {
        let requests: Vec<Request> = (0..400u64)
            .map(|index| request(index as f64 * 60_000.0, &[index * 10, index * 10 + 1]))
            .collect();
        let drawn = served("smg@1.13", &requests, 3);
        assert!(
            drawn.iter().all(|&count| (70..=130).contains(&count)),
            "{drawn:?}"
        );
        assert_eq!(served("sglang@0.3", &requests, 3), [400, 0, 0, 0]);
        // The draw follows the seed.
        assert_eq!(served("smg@1.13", &requests, 3), drawn);
        assert_ne!(served("smg@1.13", &requests, 4), drawn);
    }

    #[test]
    fn a_hot_prefix_stays_with_its_holder_until_the_spill_gate_opens() {
        // Twenty requests for one document at once: the first holder keeps
        // it while its load is within four of the mean (the margin capped at
        // the in-flight count's swing, however large the threshold), then
        // the least loaded other workers become holders too. Only an
        // infinite relative threshold keeps it on one worker.
        let requests: Vec<Request> = (0..20u64)
            .map(|index| request(0.0, &[1, 2, 3, 4, 5, 6, 7, 100 + index]))
            .collect();
        for spilling in ["smg@1.13:abs-gap=16", "smg@1.13:abs-gap=inf"] {
            let spilled = served(spilling, &requests, 1);
            assert!(
                spilled.iter().filter(|&&count| count > 0).count() >= 2,
                "{spilled:?}"
            );
        }
        let kept = served("smg@1.13:rel-gap=inf", &requests, 1);
        assert_eq!(
            kept.iter().filter(|&&count| count > 0).count(),
            1,
            "{kept:?}"
        );
    }

    #[test]
    fn prefix_hash_keeps_a_prefix_on_one_worker_and_hands_it_on_under_load() {
        let spaced: Vec<Request> = (0..40u64)
            .map(|index| request(index as f64 * 60_000.0, &[index % 2, 1000 + index]))
            .collect();
        // Over HTTP nothing is hashed: every request, whatever its prefix,
        // goes to the first idle worker.
        assert_eq!(
            served("smg@1.13:policy=prefix_hash", &spaced, 0),
            [40, 0, 0, 0]
        );
        // Tokenized, each of the two prefixes keeps to one worker.
        let hashed = served("smg@1.13:policy=prefix_hash,tokenized=true", &spaced, 0);
        assert!(
            hashed.iter().filter(|&&count| count > 0).count() <= 2,
            "{hashed:?}"
        );
        assert_eq!(hashed.iter().sum::<u64>(), 40);
        let burst: Vec<Request> = (0..40u64)
            .map(|index| request(0.0, &[7, 1000 + index]))
            .collect();
        let spread = served(
            "smg@1.13:policy=prefix_hash,tokenized=true,abs-gap=2",
            &burst,
            0,
        );
        assert!(
            spread.iter().filter(|&&count| count > 0).count() > 1,
            "{spread:?}"
        );
    }

    #[test]
    fn power_of_two_never_picks_the_busier_of_its_pair() {
        // One burst: every choice is between two workers' in-flight counts,
        // so no worker can get more than one request ahead of the others'
        // minimum by more than the pair allows; the spread stays narrow.
        let burst: Vec<Request> = (0..200u64).map(|index| request(0.0, &[index])).collect();
        let counts = served("smg@1.13:policy=power_of_two", &burst, 2);
        let (most, least) = (counts.iter().max().unwrap(), counts.iter().min().unwrap());
        assert!(most - least <= 4, "{counts:?}");
        let random = served("smg@1.13:policy=consistent_hashing", &burst, 2);
        assert!(random.iter().max().unwrap() - random.iter().min().unwrap() > most - least);
    }

    #[test]
    fn bad_smg_policies_name_the_parameter() {
        for (given, expected) in [
            ("smg@1.13:policy=bucket", "policy=bucket: smg@1.13 replays"),
            ("smg@1.13:rel-gap=0.5", "at least 1"),
            (
                "smg@1.13:policy=prefix_hash,prefix-tokens=2.5",
                "whole number",
            ),
            (
                "smg@1.13:policy=least_load,threshold=0.2",
                "takes no parameter \"threshold\"",
            ),
            ("smg@1.12", "unknown policy \"smg@1.12\""),
            (
                "smg@1.13:tokenized=true",
                "only policy=prefix_hash takes it",
            ),
            (
                "smg@1.13:policy=prefix_hash,tokenized=yes",
                "expected true or false",
            ),
        ] {
            let error = PolicySpec::parse(given).unwrap_err().to_string();
            assert!(error.contains(expected), "{given}: {error}");
        }
    }
}
