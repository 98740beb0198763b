//! What a replica remembers of earlier prompts: the engine's prefix cache
//! (blocks evicted least-recently-used, at block granularity) and the
//! router's approximate index of it (a bounded history of the prompts it sent
//! there). The two drift apart by design: the index can believe in a prefix
//! the engine has already evicted.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

type BlockMap<V> = HashMap<u64, V, foldhash::fast::FixedState>;

fn block_map<V>() -> BlockMap<V> {
    HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x0063_6163_6865))
}

const NONE: u32 = u32::MAX;

/// One cached block in the recency list.
#[derive(Debug, Clone, Copy)]
struct Slot {
    block: u64,
    newer: u32,
    older: u32,
}

/// An engine's prefix cache: `capacity` blocks (or unbounded), evicted
/// least-recently-used. A prompt's cached prefix is its leading blocks
/// present in the cache; matching stops at the first miss, as in vLLM's and
/// SGLang's prefix caches.
#[derive(Debug, Clone)]
pub struct BlockCache {
    capacity: Option<usize>,
    index: BlockMap<u32>,
    slots: Vec<Slot>,
    newest: u32,
    oldest: u32,
}

impl BlockCache {
    pub fn new(capacity: Option<usize>) -> BlockCache {
        BlockCache {
            capacity,
            index: block_map(),
            slots: Vec::new(),
            newest: NONE,
            oldest: NONE,
        }
    }

    /// How many leading blocks of `blocks` are cached.
    pub fn leading_hits(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|block| self.index.contains_key(block))
            .count()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Caches a prompt's blocks, making them the most recently used. The tail
    /// is refreshed before the head so that, within one prompt, the tail is
    /// evicted first: engines evict the leaves of their prefix tree before
    /// the shared trunk.
    pub fn insert(&mut self, blocks: &[u64]) {
        for &block in blocks.iter().rev() {
            self.touch(block);
        }
    }

    fn touch(&mut self, block: u64) {
        if self.capacity == Some(0) {
            return;
        }
        if let Some(&slot) = self.index.get(&block) {
            self.unlink(slot);
            self.push_newest(slot);
            return;
        }
        let slot = match self.capacity {
            Some(capacity) if self.index.len() >= capacity => {
                let victim = self.oldest;
                self.unlink(victim);
                self.index.remove(&self.slots[victim as usize].block);
                self.slots[victim as usize].block = block;
                victim
            }
            _ => {
                self.slots.push(Slot {
                    block,
                    newer: NONE,
                    older: NONE,
                });
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 cached blocks")
            }
        };
        self.index.insert(block, slot);
        self.push_newest(slot);
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { newer, older, .. } = self.slots[slot as usize];
        if newer == NONE {
            self.newest = older;
        } else {
            self.slots[newer as usize].older = older;
        }
        if older == NONE {
            self.oldest = newer;
        } else {
            self.slots[older as usize].newer = newer;
        }
    }

    fn push_newest(&mut self, slot: u32) {
        let previous = self.newest;
        self.slots[slot as usize].newer = NONE;
        self.slots[slot as usize].older = previous;
        if previous == NONE {
            self.oldest = slot;
        } else {
            self.slots[previous as usize].newer = slot;
        }
        self.newest = slot;
    }
}

/// The router's view of one replica's cache: the last `history` prompts it
/// sent there, as SGLang's router and the endpoint picker's approximate
/// prefix scorer keep it, not the engine's true contents.
#[derive(Debug, Clone)]
pub struct PrefixIndex {
    history: usize,
    prompts: VecDeque<Arc<[u64]>>,
    /// Per block: the prompts remembered that hold it, and the most of it
    /// any of them used (a prompt's last block may be partial).
    counts: BlockMap<(u32, u32)>,
    /// The tokens of the distinct text the index holds.
    tokens: u64,
}

impl PrefixIndex {
    pub fn new(history: usize) -> PrefixIndex {
        PrefixIndex {
            history,
            prompts: VecDeque::new(),
            counts: block_map(),
            tokens: 0,
        }
    }

    /// How many leading blocks of `blocks` the index believes cached.
    pub fn leading_matches(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|block| self.counts.contains_key(block))
            .count()
    }

    /// Distinct blocks the index holds: the router's idea of how much this
    /// replica has cached.
    pub fn blocks(&self) -> usize {
        self.counts.len()
    }

    /// Tokens of distinct text the index holds, a partial last block
    /// counting what it used: SGLang 0.1's measure of a tree, in characters
    /// of the prompts it inserted.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Remembers a prompt of `input_tokens` spelled as `blocks` of
    /// `block_tokens` each.
    pub fn remember(&mut self, blocks: &Arc<[u64]>, input_tokens: u32, block_tokens: u32) {
        if self.history == 0 {
            return;
        }
        let mut left = input_tokens;
        for &block in blocks.iter() {
            let used = left.clamp(1, block_tokens);
            left = left.saturating_sub(block_tokens);
            let (prompts, tokens) = self.counts.entry(block).or_insert((0, 0));
            *prompts += 1;
            if used > *tokens {
                self.tokens += u64::from(used - *tokens);
                *tokens = used;
            }
        }
        self.prompts.push_back(Arc::clone(blocks));
        if self.prompts.len() > self.history {
            let forgotten = self.prompts.pop_front().expect("longer than history");
            for block in forgotten.iter() {
                if let Some((prompts, tokens)) = self.counts.get_mut(block) {
                    *prompts -= 1;
                    if *prompts == 0 {
                        self.tokens -= u64::from(*tokens);
                        self.counts.remove(block);
                    }
                }
            }
        }
    }

    /// Loses everything, as a restarted router does.
    pub fn clear(&mut self) {
        self.prompts.clear();
        self.counts.clear();
        self.tokens = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matching_stops_at_the_first_missing_block() {
        let mut cache = BlockCache::new(None);
        cache.insert(&[1, 2, 3]);
        assert_eq!(cache.leading_hits(&[1, 2, 9, 3]), 2);
        assert_eq!(cache.leading_hits(&[9, 1, 2]), 0);
    }

    #[test]
    fn a_full_cache_evicts_a_prompts_tail_before_its_head() {
        let mut cache = BlockCache::new(Some(3));
        cache.insert(&[1, 2, 3]);
        cache.insert(&[4]);
        assert_eq!(cache.leading_hits(&[1, 2]), 2);
        assert_eq!(cache.leading_hits(&[3]), 0, "the tail went first");
        cache.insert(&[5, 6]);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.leading_hits(&[1]), 0);
    }

    #[test]
    fn the_index_forgets_prompts_beyond_its_history() {
        let mut index = PrefixIndex::new(2);
        for prompt in [[1u64, 2], [1, 3], [4, 5]] {
            index.remember(&Arc::from(&prompt[..]), 2 * 512, 512);
        }
        assert_eq!(index.leading_matches(&[1, 2]), 1, "[1, 2] was forgotten");
        assert_eq!(index.leading_matches(&[1, 3]), 2);
        assert_eq!(index.blocks(), 4);
        assert_eq!(index.tokens(), 4 * 512);
    }

    #[test]
    fn the_index_counts_a_partial_last_block_by_the_most_any_prompt_used() {
        let mut index = PrefixIndex::new(10);
        index.remember(&Arc::from(&[1u64, 2][..]), 512 + 100, 512);
        assert_eq!(index.tokens(), 612);
        index.remember(&Arc::from(&[1u64, 2, 3][..]), 2 * 512 + 7, 512);
        assert_eq!(index.tokens(), 2 * 512 + 7, "block 2 is whole now");
        index.remember(&Arc::from(&[1u64, 2][..]), 512 + 100, 512);
        assert_eq!(index.tokens(), 2 * 512 + 7);
    }

    proptest! {
        /// The linked-list cache against a plain recency list.
        #[test]
        fn the_cache_agrees_with_a_recency_list(
            capacity in 1usize..6,
            prompts in proptest::collection::vec(proptest::collection::vec(0u64..8, 1..5), 1..40),
        ) {
            let mut cache = BlockCache::new(Some(capacity));
            let mut recency: Vec<u64> = Vec::new();
            for prompt in &prompts {
                let expected = prompt.iter().take_while(|block| recency.contains(block)).count();
                prop_assert_eq!(cache.leading_hits(prompt), expected);
                cache.insert(prompt);
                for &block in prompt.iter().rev() {
                    recency.retain(|&cached| cached != block);
                    recency.push(block);
                    if recency.len() > capacity {
                        recency.remove(0);
                    }
                }
                prop_assert_eq!(cache.len(), recency.len());
            }
        }
    }
}
