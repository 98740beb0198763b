//! Prompts as sparse feature vectors: hashed word unigrams and bigrams with
//! sublinear counts, L2-normalised, plus one indicator for the slice. The
//! hash is FNV-1a, fixed, so a trained router scores the same on every
//! machine and release.

use crate::stats::random::fnv1a_parts;

/// The featurisation's name and version, which a signed config pins beside
/// the router file: a change to how prompts become features is a new
/// version, and a config pinned to the old one is refused.
pub const FEATURES_VERSION: &str =
    "routeval.features/1: fnv1a word unigrams and bigrams, 2^20 buckets, slice indicator";

/// log2 of the number of hashed feature buckets.
pub const BUCKET_BITS: u32 = 20;
pub const BUCKETS: usize = 1 << BUCKET_BITS;

fn bucket(hash: u64) -> u32 {
    (hash >> (64 - BUCKET_BITS)) as u32
}

/// A sparse vector: sorted, distinct buckets and their values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Features {
    pub indices: Vec<u32>,
    pub values: Vec<f32>,
}

/// The features of one prompt in one slice.
pub fn featurise(prompt: &str, slice: &str) -> Features {
    let lowered = prompt.to_lowercase();
    let words: Vec<&str> = lowered
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    let mut hashed: Vec<u32> = Vec::with_capacity(words.len() * 2);
    for (index, word) in words.iter().enumerate() {
        hashed.push(bucket(fnv1a_parts(&[b"w", word.as_bytes()])));
        if let Some(next) = words.get(index + 1) {
            hashed.push(bucket(fnv1a_parts(&[
                b"b",
                word.as_bytes(),
                next.as_bytes(),
            ])));
        }
    }
    hashed.sort_unstable();
    let mut features = Features::default();
    for run in hashed.chunk_by(|a, b| a == b) {
        features.indices.push(run[0]);
        features.values.push(1.0 + (run.len() as f32).ln());
    }
    let norm = features
        .values
        .iter()
        .map(|value| value * value)
        .sum::<f32>()
        .sqrt();
    if norm > 0.0 {
        for value in &mut features.values {
            *value /= norm;
        }
    }
    let slice_bucket = bucket(fnv1a_parts(&[b"s", slice.as_bytes()]));
    match features.indices.binary_search(&slice_bucket) {
        Ok(position) => features.values[position] += 1.0,
        Err(position) => {
            features.indices.insert(position, slice_bucket);
            features.values.insert(position, 1.0);
        }
    }
    features
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_features_are_normalised_and_the_slice_is_added() {
        let features = featurise("The cat sat. The cat!", "pets");
        assert!(features.indices.windows(2).all(|pair| pair[0] < pair[1]));
        let slice_bucket = bucket(fnv1a_parts(&[b"s", b"pets"]));
        let text_norm: f32 = features
            .indices
            .iter()
            .zip(&features.values)
            .filter(|(index, _)| **index != slice_bucket)
            .map(|(_, value)| value * value)
            .sum();
        assert!((text_norm - 1.0).abs() < 1e-5);
        assert_eq!(featurise("The cat sat. The cat!", "pets"), features);
        assert_ne!(featurise("The cat sat. The cat!", "dogs"), features);
        // Case and punctuation do not matter.
        assert_eq!(featurise("the CAT, sat the cat", "pets"), features);
    }
}
