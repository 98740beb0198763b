//! The pool of replicas as a discrete-event simulation: arrivals from the
//! trace, a router that sees (possibly stale) load and its own prefix index,
//! and replicas that batch, prefill and decode. One [`Simulation`] per
//! policy; every simulation sees the same requests in the same order, so
//! their differences are the policies' alone.
//!
//! The model (docs/replay.md): a replica runs up to `max_batch` requests at
//! once and queues the rest first come, first served. An admitted request's
//! uncached prompt tokens are prefilled at `prefill_tokens_per_s`, one
//! prefill at a time per replica (prefill is compute-bound and shares the
//! replica); its first token arrives when its prefill ends; then it decodes
//! `output_length` tokens at `decode_ms_per_token` and leaves. Its prompt's
//! blocks enter the replica's cache when it is admitted.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use super::cache::{BlockCache, PrefixIndex};
use super::metrics::{Histogram, WindowSums};
use super::strategy::PolicySpec;
use crate::replay::trace::Request;

/// The pool's constants; each is a flag with a documented default.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub replicas: usize,
    /// Arrivals come this many times faster than the trace recorded them:
    /// the same traffic at a higher rate.
    pub speedup: f64,
    /// Prefix-cache capacity per replica in blocks; `None` is unbounded.
    pub cache_blocks: Option<usize>,
    pub block_tokens: u32,
    pub prefill_tokens_per_s: f64,
    pub decode_ms_per_token: f64,
    pub max_batch: u32,
    /// How often the router's view of load is refreshed; 0 means it always
    /// sees the true load.
    pub scrape_ms: f64,
    /// Prompts per replica the router's prefix index remembers.
    pub index_history: usize,
    /// Trace time at which the router loses its prefix index.
    pub index_loss_at_ms: Option<f64>,
    /// Tokens of KV cache per replica, for the scorer's KV-use signal.
    pub kv_tokens: u64,
    pub window_ms: f64,
    pub seed: u64,
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            replicas: 8,
            speedup: 1.0,
            cache_blocks: None,
            block_tokens: 512,
            prefill_tokens_per_s: 10_000.0,
            decode_ms_per_token: 20.0,
            max_batch: 32,
            scrape_ms: 0.0,
            index_history: 512,
            index_loss_at_ms: None,
            kv_tokens: 1 << 20,
            window_ms: 60_000.0,
            seed: 0,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PoolError {
    #[error("--replicas: must be at least 1")]
    NoReplicas,
    #[error("--{flag}: {problem}")]
    Invalid { flag: &'static str, problem: String },
}

impl Pool {
    pub fn check(&self) -> Result<(), PoolError> {
        let invalid = |flag: &'static str, problem: &str| {
            Err(PoolError::Invalid {
                flag,
                problem: problem.to_owned(),
            })
        };
        if self.replicas == 0 {
            return Err(PoolError::NoReplicas);
        }
        if self.replicas > 4096 {
            return invalid("replicas", "at most 4096");
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            return invalid("speedup", "must be a positive number");
        }
        if self.block_tokens == 0 {
            return invalid("block-tokens", "must be at least 1");
        }
        if !(self.prefill_tokens_per_s.is_finite() && self.prefill_tokens_per_s > 0.0) {
            return invalid("prefill-tokens-per-s", "must be a positive number");
        }
        if !(self.decode_ms_per_token.is_finite() && self.decode_ms_per_token >= 0.0) {
            return invalid("decode-ms-per-token", "must be a non-negative number");
        }
        if self.max_batch == 0 {
            return invalid("max-batch", "must be at least 1");
        }
        if !(self.scrape_ms.is_finite() && self.scrape_ms >= 0.0) {
            return invalid("scrape-ms", "must be a non-negative number");
        }
        if self.kv_tokens == 0 {
            return invalid("kv-tokens", "must be at least 1");
        }
        if !(self.window_ms.is_finite() && self.window_ms > 0.0) {
            return invalid("window", "must be a positive duration");
        }
        Ok(())
    }
}

/// A request waiting for a slot on its replica.
#[derive(Debug, Clone)]
pub(super) struct Waiting {
    pub(super) arrival: u64,
    pub(super) input_tokens: u32,
    pub(super) output_tokens: u32,
    pub(super) blocks: Arc<[u64]>,
    /// Blocks the router believed cached when it sent the request here
    /// because of them.
    pub(super) expected_blocks: usize,
}

#[derive(Debug, Clone)]
pub(super) struct Replica {
    pub(super) running: u32,
    pub(super) waiting: VecDeque<Waiting>,
    pub(super) prefill_free_at: u64,
    /// Prompt and output tokens of the running requests: their KV use.
    pub(super) running_tokens: u64,
    pub(super) cache: BlockCache,
    pub(super) index: PrefixIndex,
    /// The load, queue depth and KV tokens at the last scrape, and the
    /// requests dispatched here since.
    pub(super) scraped_load: u32,
    pub(super) scraped_waiting: u32,
    pub(super) scraped_tokens: u64,
    pub(super) dispatched: u32,
}

impl Replica {
    pub(super) fn load(&self) -> u32 {
        self.running + self.waiting.len() as u32
    }
}

/// Sums over the whole replay of one policy.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub prefill_tokens: u64,
    pub ttft: Histogram,
    pub queue: Histogram,
    /// Time-weighted sum of max/min running requests, and the time it covers.
    pub imbalance_weighted: f64,
    pub busy_us: u64,
    /// Replica-microseconds spent above twice the mean load.
    pub herding_us: u64,
    pub index_drift_misses: u64,
    /// Requests sent to each replica.
    pub replica_requests: Vec<u64>,
    /// By window number from the first arrival: only windows with requests
    /// are kept, so memory grows with the requests, not the time they span.
    pub windows: std::collections::BTreeMap<u64, WindowSums>,
    pub first_arrival_us: Option<u64>,
}

/// One policy's replay of the pool.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub policy: PolicySpec,
    pub(super) pool: Pool,
    pub(super) replicas: Vec<Replica>,
    /// Completions: (time, replica, tokens it held).
    pub(super) completions: BinaryHeap<Reverse<(u64, u32, u64)>>,
    pub(super) next_scrape: u64,
    pub(super) scrape_us: u64,
    pub(super) observed_at: u64,
    pub(super) index_lost: bool,
    pub(super) cursor: usize,
    /// `sglang@0.3`: the replica the router's tree last named for a prefix,
    /// by the prefix's last block.
    pub(super) tree_named: std::collections::HashMap<u64, u32>,
    /// The draws of the policies that break ties at random (`smg@1.13`).
    pub(super) random: crate::stats::random::Random,
    /// `smg@1.13:policy=prefix_hash`: the hash ring's points and their
    /// replicas, built at the first request.
    pub(super) ring: Vec<(u64, u32)>,
    pub totals: Totals,
}

fn micros(milliseconds: f64) -> u64 {
    (milliseconds * 1000.0).round() as u64
}

impl Simulation {
    pub fn new(pool: &Pool, policy: PolicySpec) -> Simulation {
        let replica = Replica {
            running: 0,
            waiting: VecDeque::new(),
            prefill_free_at: 0,
            running_tokens: 0,
            cache: BlockCache::new(pool.cache_blocks),
            index: PrefixIndex::new(pool.index_history),
            scraped_load: 0,
            scraped_waiting: 0,
            scraped_tokens: 0,
            dispatched: 0,
        };
        Simulation {
            policy,
            replicas: vec![replica; pool.replicas],
            completions: BinaryHeap::new(),
            scrape_us: micros(pool.scrape_ms),
            next_scrape: 0,
            observed_at: 0,
            index_lost: false,
            cursor: 0,
            tree_named: std::collections::HashMap::new(),
            random: crate::stats::random::Random::new(pool.seed),
            ring: Vec::new(),
            totals: Totals {
                replica_requests: vec![0; pool.replicas],
                ..Totals::default()
            },
            pool: pool.clone(),
        }
    }

    /// Whether a request arriving at `arrival_ms` (as recorded) arrives,
    /// replayed at the pool's speed, within what the simulation's clock of
    /// microseconds holds with room for the work after it (2^62 µs, some
    /// 146,000 years).
    pub fn clock_holds(&self, arrival_ms: f64) -> bool {
        arrival_ms / self.pool.speedup * 1000.0 <= (1u64 << 62) as f64
    }

    /// Routes and serves one request; requests come in arrival order.
    pub fn offer(&mut self, request: &Request) {
        let arrival_ms = request.arrival_ms / self.pool.speedup;
        let now = micros(arrival_ms);
        self.totals.first_arrival_us.get_or_insert(now);
        self.advance(now);
        if let Some(loss) = self.pool.index_loss_at_ms
            && !self.index_lost
            && arrival_ms >= loss
        {
            self.index_lost = true;
            for replica in &mut self.replicas {
                replica.index.clear();
            }
        }
        let (target, expected_blocks) = self.route(request);
        let replica = &mut self.replicas[target];
        replica.index.remember(
            &request.blocks,
            request.input_tokens,
            self.pool.block_tokens,
        );
        replica.dispatched += 1;
        let waiting = Waiting {
            arrival: now,
            input_tokens: request.input_tokens,
            output_tokens: request.output_tokens,
            blocks: Arc::clone(&request.blocks),
            expected_blocks,
        };
        if replica.running < self.pool.max_batch && replica.waiting.is_empty() {
            self.admit(target, waiting, now);
        } else {
            replica.waiting.push_back(waiting);
        }
    }

    /// Serves every request still in the pool.
    pub fn finish(&mut self) {
        self.advance(u64::MAX);
    }

    /// Processes completions and scrapes up to `now`, in time order.
    fn advance(&mut self, now: u64) {
        loop {
            let completion = self.completions.peek().map(|Reverse(event)| event.0);
            let scrape = (self.scrape_us > 0).then_some(self.next_scrape);
            let next = match (completion, scrape) {
                (Some(completion), Some(scrape)) => completion.min(scrape),
                (Some(completion), None) => completion,
                (None, Some(scrape)) if now != u64::MAX => scrape,
                (None, _) => break,
            };
            if next > now {
                break;
            }
            self.observe(next);
            if scrape == Some(next) {
                for replica in &mut self.replicas {
                    replica.scraped_load = replica.load();
                    replica.scraped_waiting = replica.waiting.len() as u32;
                    replica.scraped_tokens = replica.running_tokens;
                    replica.dispatched = 0;
                }
                // Nothing changes between events, so the scrapes up to the
                // next one are taken in one step.
                let quiet = now.min(completion.unwrap_or(now)) - next;
                self.next_scrape = next + (quiet / self.scrape_us).max(1) * self.scrape_us;
                continue;
            }
            let Reverse((_, index, tokens)) = self.completions.pop().expect("peeked");
            let replica = &mut self.replicas[index as usize];
            replica.running -= 1;
            replica.running_tokens -= tokens;
            if let Some(waiting) = replica.waiting.pop_front() {
                self.admit(index as usize, waiting, next);
            }
        }
        if now != u64::MAX {
            self.observe(now);
        }
    }

    fn admit(&mut self, index: usize, request: Waiting, now: u64) {
        self.observe(now);
        let pool = &self.pool;
        let replica = &mut self.replicas[index];
        let hits = replica.cache.leading_hits(&request.blocks);
        if hits < request.expected_blocks {
            self.totals.index_drift_misses += 1;
        }
        replica.cache.insert(&request.blocks);
        let input = u64::from(request.input_tokens);
        let cached = (hits as u64 * u64::from(pool.block_tokens)).min(input);
        let prefill = input - cached;
        let start = now.max(replica.prefill_free_at);
        let first_token = start + (prefill as f64 / pool.prefill_tokens_per_s * 1e6).round() as u64;
        replica.prefill_free_at = first_token;
        let done =
            first_token + micros(f64::from(request.output_tokens) * pool.decode_ms_per_token);
        let tokens = input + u64::from(request.output_tokens);
        replica.running += 1;
        replica.running_tokens += tokens;
        self.completions.push(Reverse((done, index as u32, tokens)));

        let ttft_ms = (first_token - request.arrival) as f64 / 1000.0;
        let totals = &mut self.totals;
        totals.requests += 1;
        totals.replica_requests[index] += 1;
        totals.prompt_tokens += input;
        totals.cached_tokens += cached;
        totals.prefill_tokens += prefill;
        totals.ttft.record(ttft_ms);
        totals
            .queue
            .record((start - request.arrival) as f64 / 1000.0);
        let origin = totals.first_arrival_us.unwrap_or(0);
        let window = ((request.arrival - origin) as f64 / (pool.window_ms * 1000.0)) as u64;
        let sums = totals.windows.entry(window).or_default();
        sums.requests += 1;
        sums.prompt_tokens += input;
        sums.cached_tokens += cached;
        sums.ttft_ms += ttft_ms;
    }

    /// Accounts for the load between the last observation and `now`.
    fn observe(&mut self, now: u64) {
        if now <= self.observed_at {
            return;
        }
        let elapsed = now - self.observed_at;
        self.observed_at = now;
        let (mut most, mut least, mut total) = (0u32, u32::MAX, 0u64);
        for replica in &self.replicas {
            most = most.max(replica.running);
            least = least.min(replica.running);
            total += u64::from(replica.load());
        }
        if most == 0 {
            return;
        }
        let totals = &mut self.totals;
        totals.busy_us += elapsed;
        totals.imbalance_weighted += elapsed as f64 * f64::from(most) / f64::from(least.max(1));
        let twice_mean = 2.0 * total as f64 / self.replicas.len() as f64;
        let herding = self
            .replicas
            .iter()
            .filter(|replica| f64::from(replica.load()) > twice_mean)
            .count() as u64;
        totals.herding_us += herding * elapsed;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A request of whole 512-token blocks answered with one token.
    pub(in crate::replay::replicas) fn request(arrival_ms: f64, blocks: &[u64]) -> Request {
        Request {
            arrival_ms,
            input_tokens: 512 * blocks.len() as u32,
            output_tokens: 1,
            blocks: blocks.into(),
        }
    }

    fn served(policy: &str, requests: &[Request]) -> Vec<u64> {
        served_with_seed(policy, requests, 0)
    }

    /// The requests each of four replicas served under `policy`.
    pub(in crate::replay::replicas) fn served_with_seed(
        policy: &str,
        requests: &[Request],
        seed: u64,
    ) -> Vec<u64> {
        let pool = Pool {
            replicas: 4,
            seed,
            ..Pool::default()
        };
        let mut simulation = Simulation::new(&pool, PolicySpec::parse(policy).unwrap());
        for request in requests {
            simulation.offer(request);
        }
        simulation.finish();
        simulation.totals.replica_requests
    }

    #[test]
    fn with_no_load_sglang_sends_every_unrelated_prompt_to_its_first_replica() {
        // One at a time (a minute apart), nothing shared.
        let requests: Vec<Request> = (0..12u64)
            .map(|index| request(index as f64 * 60_000.0, &[index * 10, index * 10 + 1]))
            .collect();
        assert_eq!(served("sglang@0.3", &requests), [12, 0, 0, 0]);
        // 0.1 sends each to the smallest tree: they take turns.
        assert_eq!(served("sglang@0.1", &requests), [3, 3, 3, 3]);
        // routeval's cache-aware spreads them too.
        assert_eq!(served("cache-aware", &requests), [3, 3, 3, 3]);
    }

    #[test]
    fn sglang_0_1_measures_a_tree_in_tokens_not_blocks() {
        // One replica holds one whole block (512 tokens), the other two
        // one-token prompts (two blocks, 2 tokens): 0.1's smallest tree is
        // the second, by the characters it holds.
        let prompt = |arrival_ms: f64, block: u64, tokens: u32| Request {
            input_tokens: tokens,
            ..request(arrival_ms, &[block])
        };
        let requests = [
            prompt(0.0, 1, 512),
            prompt(60_000.0, 2, 1),
            prompt(120_000.0, 3, 1),
            prompt(180_000.0, 4, 1),
        ];
        let pool = Pool {
            replicas: 2,
            ..Pool::default()
        };
        let mut simulation = Simulation::new(&pool, PolicySpec::parse("sglang@0.1").unwrap());
        for request in &requests {
            simulation.offer(request);
        }
        simulation.finish();
        let mut served = simulation.totals.replica_requests;
        served.sort_unstable();
        assert_eq!(served, [1, 3]);
    }

    #[test]
    fn sglang_keeps_naming_one_holder_of_a_shared_prefix() {
        // A burst of requests for one document: the load guard (a gap over
        // 2) copies it onto every replica, and whenever the loads are
        // balanced again the tree names the holder it named first, where
        // cache-aware takes the least loaded holder.
        let requests: Vec<Request> = (0..24u64)
            .map(|index| request(0.0, &[1, 2, 3, 4, 5, 6, 7, 100 + index]))
            .collect();
        let sglang = served("sglang@0.3:abs-gap=2", &requests);
        let balanced = served("cache-aware:abs-gap=2", &requests);
        assert!(sglang.iter().all(|&count| count > 0), "{sglang:?}");
        assert_eq!(sglang.iter().max(), Some(&sglang[0]), "{sglang:?}");
        assert!(
            sglang[0] > *balanced.iter().max().unwrap(),
            "{sglang:?} {balanced:?}"
        );
    }
}
