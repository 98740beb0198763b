//! Where the router sends a request: each policy's choice of replica, from
//! the load it sees (possibly stale), its prefix index, and for SGLang's
//! releases, their own tree.

use super::pool::Simulation;
use super::strategy::{SglangRelease, Strategy};
use crate::replay::trace::Request;

impl Simulation {
    /// The load the router believes replica `index` has.
    pub(super) fn seen_load(&self, index: usize) -> u32 {
        let replica = &self.replicas[index];
        if self.scrape_us == 0 {
            return replica.load();
        }
        replica.scraped_load
            + if self.policy.count_dispatched {
                replica.dispatched
            } else {
                0
            }
    }

    fn seen_waiting(&self, index: usize) -> u32 {
        let replica = &self.replicas[index];
        if self.scrape_us == 0 {
            return replica.waiting.len() as u32;
        }
        replica.scraped_waiting
            + if self.policy.count_dispatched {
                replica.dispatched
            } else {
                0
            }
    }

    fn seen_tokens(&self, index: usize) -> u64 {
        let replica = &self.replicas[index];
        if self.scrape_us == 0 {
            replica.running_tokens
        } else {
            replica.scraped_tokens
        }
    }

    /// The replica for `request`, and the blocks the router expects it to
    /// find cached there when affinity chose it (0 otherwise).
    pub(super) fn route(&mut self, request: &Request) -> (usize, usize) {
        let count = self.replicas.len();
        match self.policy.strategy {
            Strategy::RoundRobin => {
                let target = self.cursor % count;
                self.cursor += 1;
                (target, 0)
            }
            Strategy::LeastLoad => (self.least_loaded(false), 0),
            Strategy::Session { min_blocks } => {
                let (target, matched) = self.longest_match(&request.blocks);
                if matched >= min_blocks {
                    (target, matched)
                } else {
                    (self.least_loaded(false), 0)
                }
            }
            Strategy::PrefixHash { blocks, bound } => {
                let key = &request.blocks[..blocks.min(request.blocks.len())];
                let hash = foldhash::fast::FixedState::with_seed(self.pool.seed);
                let mut target =
                    (std::hash::BuildHasher::hash_one(&hash, key) % count as u64) as usize;
                if let Some(bound) = bound {
                    let total: u64 = (0..count)
                        .map(|index| u64::from(self.seen_load(index)))
                        .sum();
                    let cap = (bound * (total + 1) as f64 / count as f64).ceil() as u32;
                    while self.seen_load(target) >= cap {
                        target = (target + 1) % count;
                    }
                }
                (target, 0)
            }
            Strategy::CacheAware {
                threshold,
                abs_gap,
                rel_gap,
            } => {
                let loads: Vec<u32> = (0..count).map(|index| self.seen_load(index)).collect();
                let most = *loads.iter().max().expect("a replica");
                let least = *loads.iter().min().expect("a replica");
                let gap = f64::from(most - least);
                if gap > abs_gap && f64::from(most) > rel_gap * f64::from(least.max(1)) {
                    return (self.least_loaded(true), 0);
                }
                let (target, matched) = self.longest_match(&request.blocks);
                if self.covered(request, matched) > threshold {
                    (target, matched)
                } else {
                    (self.least_loaded(true), 0)
                }
            }
            Strategy::Sglang {
                release,
                threshold,
                abs_gap,
                rel_gap,
            } => {
                let loads: Vec<u32> = (0..count).map(|index| self.seen_load(index)).collect();
                let most = f64::from(*loads.iter().max().expect("a replica"));
                let least = f64::from(*loads.iter().min().expect("a replica"));
                if most - least > abs_gap && most > rel_gap * least {
                    return (first_least(&loads), 0);
                }
                let (target, matched) = self.tree_choice(release, &request.blocks);
                if self.covered(request, matched) > threshold {
                    return (target, matched);
                }
                match release {
                    SglangRelease::V0_3 => (first_least(&loads), 0),
                    // The smallest tree in characters; ties go to the first
                    // in the order of the router's map of trees, fixed for
                    // its life and arbitrary.
                    SglangRelease::V0_1 => {
                        let smallest = (0..count)
                            .min_by_key(|&index| {
                                (
                                    self.replicas[index].index.tokens(),
                                    self.hash_rank(0, index),
                                )
                            })
                            .expect("a replica");
                        (smallest, 0)
                    }
                }
            }
            Strategy::Smg(policy) => self.smg_route(policy, request),
            Strategy::Scorer { prefix, queue, kv } => {
                self.scorer_choice(request, prefix, queue, kv)
            }
        }
    }

    /// The scorer's choice: the best weighted sum of the prefix the
    /// replica's index covers, its queue's shortness and its free KV
    /// cache; ties to the least loaded, scanning from the cursor.
    fn scorer_choice(
        &mut self,
        request: &Request,
        prefix: f64,
        queue: f64,
        kv: f64,
    ) -> (usize, usize) {
        let count = self.replicas.len();
        let queues: Vec<u32> = (0..count).map(|index| self.seen_waiting(index)).collect();
        let (deepest, shallowest) = (
            *queues.iter().max().expect("a replica"),
            *queues.iter().min().expect("a replica"),
        );
        let mut best = (f64::NEG_INFINITY, u32::MAX, 0usize, 0usize);
        for offset in 0..count {
            let index = (self.cursor + offset) % count;
            let matched = self.replicas[index].index.leading_matches(&request.blocks);
            let queue_score = if deepest == shallowest {
                1.0
            } else {
                f64::from(deepest - queues[index]) / f64::from(deepest - shallowest)
            };
            let kv_use = (self.seen_tokens(index) as f64 / self.pool.kv_tokens as f64).min(1.0);
            let score =
                prefix * self.covered(request, matched) + queue * queue_score + kv * (1.0 - kv_use);
            let load = self.seen_load(index);
            if score > best.0 || (score == best.0 && load < best.1) {
                best = (score, load, index, matched);
            }
        }
        self.cursor = (best.2 + 1) % count;
        (best.2, best.3)
    }

    /// The share of the prompt that `blocks` leading blocks cover.
    pub(super) fn covered(&self, request: &Request, blocks: usize) -> f64 {
        if request.input_tokens == 0 {
            return 0.0;
        }
        let tokens = (blocks as u64 * u64::from(self.pool.block_tokens))
            .min(u64::from(request.input_tokens));
        tokens as f64 / f64::from(request.input_tokens)
    }

    /// The replica whose index shares the longest prefix with `blocks`
    /// (ties to the lower load, then the first after the cursor), and the
    /// length of that prefix.
    fn longest_match(&self, blocks: &[u64]) -> (usize, usize) {
        let count = self.replicas.len();
        let mut best = (0usize, u32::MAX, self.cursor % count);
        for offset in 0..count {
            let index = (self.cursor + offset) % count;
            let matched = self.replicas[index].index.leading_matches(blocks);
            let load = self.seen_load(index);
            if matched > best.0 || (matched == best.0 && load < best.1) {
                best = (matched, load, index);
            }
        }
        (best.2, best.0)
    }

    /// Where a hash map keyed by replica, belonging to the tree node of
    /// prefix `node` (0 for the router's own maps), puts `index` in its
    /// order: arbitrary, but fixed while the map is, and no replica first
    /// in every map.
    fn hash_rank(&self, node: u64, index: usize) -> u64 {
        crate::stats::random::splitmix64(
            self.pool.seed ^ node.rotate_left(17) ^ (index as u64).wrapping_mul(0x9e37),
        )
    }

    /// The replica SGLang's tree names for `blocks`, and the length of the
    /// prefix it matched. The tree answers with one of the replicas that hold
    /// the longest prefix: the first in the order of a hash map at the node
    /// (0.1), or from 0.2 on the one it named for that prefix before, while
    /// that replica still holds it (the node caches its answer), else that
    /// first one. The prefix's last block stands for the node.
    fn tree_choice(&mut self, release: SglangRelease, blocks: &[u64]) -> (usize, usize) {
        let matches: Vec<usize> = self
            .replicas
            .iter()
            .map(|replica| replica.index.leading_matches(blocks))
            .collect();
        let longest = *matches.iter().max().expect("a replica");
        if longest == 0 {
            return (0, 0);
        }
        let node = blocks[longest - 1];
        let sticky = release != SglangRelease::V0_1;
        if sticky
            && let Some(&named) = self.tree_named.get(&node)
            && matches[named as usize] == longest
        {
            return (named as usize, longest);
        }
        let holder = (0..matches.len())
            .filter(|&index| matches[index] == longest)
            .min_by_key(|&index| self.hash_rank(node, index))
            .expect("a holder");
        if sticky {
            self.tree_named.insert(node, holder as u32);
        }
        (holder, longest)
    }

    /// The least-loaded replica as the router sees it. Ties go to the
    /// replica with the least cached content when `by_cache`, then to the
    /// first after the previous choice, so an idle pool is not filled from
    /// replica 0 up.
    fn least_loaded(&mut self, by_cache: bool) -> usize {
        let count = self.replicas.len();
        let start = self.cursor % count;
        let mut best = (u32::MAX, usize::MAX, start);
        for offset in 0..count {
            let index = (start + offset) % count;
            let cached = if by_cache {
                self.replicas[index].index.blocks()
            } else {
                0
            };
            let key = (self.seen_load(index), cached);
            if key < (best.0, best.1) {
                best = (key.0, key.1, index);
            }
        }
        self.cursor = best.2 + 1;
        best.2
    }
}

/// The first position of the smallest value, as Rust's `min_by_key` over a
/// router's worker list finds it.
fn first_least<T: Ord + Copy>(values: &[T]) -> usize {
    let least = *values.iter().min().expect("a replica");
    values
        .iter()
        .position(|&value| value == least)
        .expect("the least is there")
}
