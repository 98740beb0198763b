//! Logistic regression on hashed features, trained with AdaGrad, and its
//! file format.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};

use crate::simulate::Random;

use super::features::{BUCKETS, Features};

/// Predicts the probability that the small tier's answer is unacceptable.
#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    pub bias: f32,
    pub weights: Vec<f32>,
}

/// Training settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Training {
    pub epochs: usize,
    pub learning_rate: f32,
    /// L2 penalty per example.
    pub l2: f32,
    pub seed: u64,
}

impl Default for Training {
    fn default() -> Self {
        Training {
            epochs: 6,
            learning_rate: 0.2,
            l2: 1e-6,
            seed: 0,
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

const MAGIC: &[u8; 8] = b"RVROUTE1";

impl Router {
    pub fn score(&self, features: &Features) -> f32 {
        let mut logit = self.bias;
        for (&index, &value) in features.indices.iter().zip(&features.values) {
            logit += self.weights[index as usize] * value;
        }
        sigmoid(logit)
    }

    /// Fits on `examples` (features, label: true when the small tier failed).
    pub fn train(examples: &[(&Features, bool)], training: &Training) -> Router {
        let mut router = Router {
            bias: 0.0,
            weights: vec![0.0; BUCKETS],
        };
        let mut squared = vec![0.0f32; BUCKETS];
        let mut bias_squared = 0.0f32;
        let mut order: Vec<usize> = (0..examples.len()).collect();
        let mut random = Random::new(training.seed);
        for _ in 0..training.epochs {
            for index in (1..order.len()).rev() {
                order.swap(index, (random.next_u64() % (index as u64 + 1)) as usize);
            }
            for &example in &order {
                let (features, label) = examples[example];
                let error = router.score(features) - f32::from(u8::from(label));
                for (&index, &value) in features.indices.iter().zip(&features.values) {
                    let index = index as usize;
                    let gradient = error * value + training.l2 * router.weights[index];
                    squared[index] += gradient * gradient;
                    router.weights[index] -=
                        training.learning_rate * gradient / (squared[index].sqrt() + 1e-8);
                }
                bias_squared += error * error;
                router.bias -= training.learning_rate * error / (bias_squared.sqrt() + 1e-8);
            }
        }
        router
    }

    /// Writes the model: a magic number, the bucket count, the bias and the
    /// weights, little-endian.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let mut bytes = Vec::with_capacity(16 + 4 * self.weights.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(self.weights.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&self.bias.to_le_bytes());
        for weight in &self.weights {
            bytes.extend_from_slice(&weight.to_le_bytes());
        }
        crate::atomic::write_atomically(path, |file| Ok(file.write_all(&bytes)?))
            .with_context(|| format!("{}: cannot write the router", path.display()))
    }

    pub fn load(path: &Path) -> anyhow::Result<Router> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .with_context(|| format!("{}: cannot read the router", path.display()))?;
        if bytes.len() < 16 || &bytes[..8] != MAGIC {
            bail!("{}: not a routeval router file", path.display());
        }
        let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        if count != BUCKETS || bytes.len() != 16 + 4 * count {
            bail!(
                "{}: a router of {count} features does not fit this routeval",
                path.display()
            );
        }
        let float = |at: usize| f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Ok(Router {
            bias: float(12),
            weights: (0..count).map(|index| float(16 + 4 * index)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::features::featurise;

    #[test]
    fn learns_a_separable_signal_and_round_trips_through_a_file() {
        let examples: Vec<(Features, bool)> = (0..400)
            .map(|index| {
                let hard = index % 2 == 0;
                let prompt = if hard {
                    format!("prove theorem {index} rigorously")
                } else {
                    format!("say hello {index}")
                };
                (featurise(&prompt, "s"), hard)
            })
            .collect();
        let borrowed: Vec<(&Features, bool)> = examples
            .iter()
            .map(|(features, label)| (features, *label))
            .collect();
        let router = Router::train(&borrowed, &Training::default());
        assert!(router.score(&featurise("prove theorem 9999 rigorously", "s")) > 0.9);
        assert!(router.score(&featurise("say hello 9999", "s")) < 0.1);

        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("router.bin");
        router.save(&path).unwrap();
        assert_eq!(Router::load(&path).unwrap(), router);
        std::fs::write(&path, b"not a router").unwrap();
        assert!(
            Router::load(&path)
                .unwrap_err()
                .to_string()
                .contains("not a routeval router file")
        );
    }
}
