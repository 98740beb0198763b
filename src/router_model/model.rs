//! The router: two logistic regressions on hashed features, one for each
//! tier's chance of failing, trained with AdaGrad; the prompts it was
//! trained on, so a score can be told to come from a prompt it never saw;
//! and its file format.
//!
//! The score is the expected quality gained by escalating a prompt,
//! P(small fails) − P(large fails). Ranking by the small tier's failure
//! alone spends large calls on prompts neither tier answers well; RouteLLM's
//! routers score the same gain as a preference for the strong model.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};

use crate::stats::Random;

use super::features::{BUCKETS, Features};

/// Predicts how much escalating a prompt to the large tier gains.
#[derive(Debug, Clone, PartialEq)]
pub struct Router {
    /// P(the small tier's answer is not acceptable).
    pub small_fails: Classifier,
    /// P(the large tier's answer is not acceptable).
    pub large_fails: Classifier,
    /// The prompts it was fitted on; `None` for a file from before routeval
    /// kept them, whose scores no certificate can rest on.
    pub trained_on: Option<TrainingSet>,
}

/// The prompts a router was fitted on, by their text's 64-bit FNV-1a hash
/// (sorted): 8 bytes a prompt, and two distinct prompts of a million share
/// a hash with odds of about 3 in 100 million.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrainingSet {
    hashes: Vec<u64>,
}

impl TrainingSet {
    pub fn of<'a>(prompts: impl IntoIterator<Item = &'a str>) -> TrainingSet {
        let mut hashes: Vec<u64> = prompts.into_iter().map(prompt_hash).collect();
        hashes.sort_unstable();
        hashes.dedup();
        TrainingSet { hashes }
    }

    /// Whether the router saw `prompt` (under any slice) while fitted.
    pub fn contains(&self, prompt: &str) -> bool {
        self.hashes.binary_search(&prompt_hash(prompt)).is_ok()
    }

    /// Distinct prompts fitted on.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

fn prompt_hash(prompt: &str) -> u64 {
    crate::stats::random::fnv1a(prompt.as_bytes())
}

/// One logistic regression over the hashed features.
#[derive(Debug, Clone, PartialEq)]
pub struct Classifier {
    pub bias: f32,
    pub weights: Vec<f32>,
}

/// What grading said of one prompt's two answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub small_ok: bool,
    pub large_ok: bool,
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

/// A score as a table stores it: the shortest decimal that reads back as
/// the same `f32`, so a threshold taken from it prints as the model's
/// precision (0.44163698) rather than the binary expansion
/// (0.44163697957992554).
pub fn stored_score(score: f32) -> f64 {
    score
        .to_string()
        .parse()
        .expect("a float's decimal form parses")
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// This build's format: [`UNTRAINED_MAGIC`]'s weights, then the training
/// set (a u64 count and the sorted hashes, little-endian).
const MAGIC: &[u8; 8] = b"RVROUTE3";
/// Weights without the training set; still loaded, so a config signed on
/// such a router keeps serving.
const UNTRAINED_MAGIC: &[u8; 8] = b"RVROUTE2";
const OLD_MAGIC: &[u8; 8] = b"RVROUTE1";

/// The formats this build loads, as a signed config's `serving.scorer`
/// names them; the first is the one it writes.
pub const ROUTER_FORMATS: [&str; 2] = ["RVROUTE3", "RVROUTE2"];

/// What `router train --out` writes: a model of any version, by the part of
/// the magic number every version shares.
pub const ROUTER_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a router model",
    crate::atomic::Replaces::Prefix(b"RVROUTE"),
);

impl Classifier {
    pub fn probability(&self, features: &Features) -> f32 {
        let mut logit = self.bias;
        for (&index, &value) in features.indices.iter().zip(&features.values) {
            logit += self.weights[index as usize] * value;
        }
        sigmoid(logit)
    }

    /// Fits on `examples` (features, label).
    pub fn train(examples: &[(&Features, bool)], training: &Training) -> Classifier {
        let mut classifier = Classifier {
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
                let error = classifier.probability(features) - f32::from(u8::from(label));
                for (&index, &value) in features.indices.iter().zip(&features.values) {
                    let index = index as usize;
                    let gradient = error * value + training.l2 * classifier.weights[index];
                    squared[index] += gradient * gradient;
                    classifier.weights[index] -=
                        training.learning_rate * gradient / (squared[index].sqrt() + 1e-8);
                }
                bias_squared += error * error;
                classifier.bias -= training.learning_rate * error / (bias_squared.sqrt() + 1e-8);
            }
        }
        classifier
    }

    fn write(&self, bytes: &mut Vec<u8>) {
        bytes.extend_from_slice(&self.bias.to_le_bytes());
        for weight in &self.weights {
            bytes.extend_from_slice(&weight.to_le_bytes());
        }
    }

    fn read(bytes: &[u8]) -> Classifier {
        let float = |at: usize| f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Classifier {
            bias: float(0),
            weights: (1..bytes.len() / 4).map(|index| float(4 * index)).collect(),
        }
    }
}

impl Router {
    /// The expected quality gained by escalating: P(small fails) −
    /// P(large fails), from −1 to 1.
    pub fn score(&self, features: &Features) -> f32 {
        self.small_fails.probability(features) - self.large_fails.probability(features)
    }

    /// Fits both classifiers on `examples`, side by side on two threads.
    pub fn train(examples: &[(&Features, Outcome)], training: &Training) -> Router {
        let labelled = |failed: fn(&Outcome) -> bool| -> Vec<(&Features, bool)> {
            examples
                .iter()
                .map(|(features, outcome)| (*features, failed(outcome)))
                .collect()
        };
        let small = labelled(|outcome| !outcome.small_ok);
        let large = labelled(|outcome| !outcome.large_ok);
        let (small_fails, large_fails) = std::thread::scope(|scope| {
            let small = scope.spawn(|| Classifier::train(&small, training));
            let large_fails = Classifier::train(&large, training);
            (small.join().expect("training does not panic"), large_fails)
        });
        Router {
            small_fails,
            large_fails,
            trained_on: None,
        }
    }

    /// The file format this router is written in, as `serving.scorer`
    /// pins it.
    pub fn format(&self) -> &'static str {
        let magic = if self.trained_on.is_some() {
            MAGIC
        } else {
            UNTRAINED_MAGIC
        };
        std::str::from_utf8(magic).expect("ascii")
    }

    /// Writes the model: a magic number, the bucket count, then each
    /// classifier's bias and weights (small, then large), and the training
    /// set where known, little-endian.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        self.stage(path)?
            .commit()
            .with_context(|| format!("{}: cannot write the router", path.display()))
    }

    /// The model written under a temporary name, committed with the
    /// command's other outputs.
    pub fn stage(&self, path: &Path) -> anyhow::Result<crate::atomic::Staged> {
        let trained_on = self.trained_on.as_ref().map_or(0, TrainingSet::len);
        let mut bytes =
            Vec::with_capacity(20 + 8 * (1 + self.small_fails.weights.len() + trained_on));
        bytes.extend_from_slice(self.format().as_bytes());
        bytes.extend_from_slice(&(self.small_fails.weights.len() as u32).to_le_bytes());
        self.small_fails.write(&mut bytes);
        self.large_fails.write(&mut bytes);
        if let Some(set) = &self.trained_on {
            bytes.extend_from_slice(&(set.hashes.len() as u64).to_le_bytes());
            for hash in &set.hashes {
                bytes.extend_from_slice(&hash.to_le_bytes());
            }
        }
        crate::atomic::Staged::new(path, |file| Ok(file.write_all(&bytes)?))
            .with_context(|| format!("{}: cannot write the router", path.display()))
    }

    pub fn load(path: &Path) -> anyhow::Result<Router> {
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut file| file.read_to_end(&mut bytes))
            .with_context(|| format!("{}: cannot read the router", path.display()))?;
        Router::from_bytes(&bytes, path)
    }

    /// The router in `bytes`, read from `path` (which errors name): for a
    /// caller that also digests the file, so it is read once.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> anyhow::Result<Router> {
        if bytes.len() >= 8 && &bytes[..8] == OLD_MAGIC {
            bail!(
                "{}: a router from an older routeval, which scored only the small tier; retrain it with `routeval router train`",
                path.display()
            );
        }
        if bytes.len() < 12 || (&bytes[..8] != MAGIC && &bytes[..8] != UNTRAINED_MAGIC) {
            bail!("{}: not a routeval router file", path.display());
        }
        let has_training_set = &bytes[..8] == MAGIC;
        let count = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let classifier_bytes = 4 * (1 + count);
        if count != BUCKETS {
            bail!(
                "{}: a router of {count} features does not fit this routeval",
                path.display()
            );
        }
        let weights_end = 12 + 2 * classifier_bytes;
        let trained_count = match bytes.get(weights_end..weights_end + 8) {
            Some(count) if has_training_set => {
                Some(u64::from_le_bytes(count.try_into().expect("8 bytes")) as usize)
            }
            _ => None,
        };
        let expected = match trained_count {
            Some(count) => (weights_end + 8).saturating_add(count.saturating_mul(8)),
            None if has_training_set => weights_end + 8,
            None => weights_end,
        };
        if bytes.len() != expected {
            bail!(
                "{}: the router file is cut short or padded ({} bytes, a router has {expected}); train it again with `routeval router train`",
                path.display(),
                bytes.len()
            );
        }
        let (small, large) = bytes[12..weights_end].split_at(classifier_bytes);
        let trained_on = trained_count.map(|_| TrainingSet {
            hashes: bytes[weights_end + 8..]
                .chunks_exact(8)
                .map(|hash| u64::from_le_bytes(hash.try_into().expect("8 bytes")))
                .collect(),
        });
        if let Some(set) = &trained_on
            && !set.hashes.is_sorted_by(|a, b| a < b)
        {
            bail!(
                "{}: the router's training set is out of order; train it again with `routeval router train`",
                path.display()
            );
        }
        Ok(Router {
            small_fails: Classifier::read(small),
            large_fails: Classifier::read(large),
            trained_on,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router_model::features::featurise;

    #[test]
    fn scores_the_gain_of_escalating_and_round_trips_through_a_file() {
        // Three kinds of prompt: ones only the large tier answers, ones both
        // answer, and ones neither answers. Only the first gain anything.
        let kinds = [
            ("prove theorem", false, true),
            ("say hello", true, true),
            ("predict the lottery", false, false),
        ];
        let examples: Vec<(Features, Outcome)> = (0..600)
            .map(|index| {
                let (text, small_ok, large_ok) = kinds[index % 3];
                let outcome = Outcome { small_ok, large_ok };
                (featurise(&format!("{text} {index}"), "s"), outcome)
            })
            .collect();
        let borrowed: Vec<(&Features, Outcome)> = examples
            .iter()
            .map(|(features, outcome)| (features, *outcome))
            .collect();
        let router = Router::train(&borrowed, &Training::default());
        let score = |text: &str| router.score(&featurise(text, "s"));
        assert!(score("prove theorem 9999") > 0.8);
        assert!(score("say hello 9999").abs() < 0.2);
        let hopeless = featurise("predict the lottery 9999", "s");
        assert!(router.small_fails.probability(&hopeless) > 0.9);
        assert!(router.score(&hopeless).abs() < 0.2);

        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("router.bin");
        router.save(&path).unwrap();
        assert_eq!(Router::load(&path).unwrap(), router);
        assert_eq!(router.format(), "RVROUTE2");
        let trained = Router {
            trained_on: Some(TrainingSet::of(["say hello 1", "prove theorem 0"])),
            ..router.clone()
        };
        trained.save(&path).unwrap();
        let loaded = Router::load(&path).unwrap();
        assert_eq!(loaded, trained);
        assert_eq!(loaded.format(), "RVROUTE3");
        let set = loaded.trained_on.unwrap();
        assert!(set.contains("say hello 1") && !set.contains("say hello 2"));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.pop();
        std::fs::write(&path, &bytes).unwrap();
        assert!(
            Router::load(&path)
                .unwrap_err()
                .to_string()
                .contains("cut short or padded")
        );
        std::fs::write(&path, b"not a router").unwrap();
        assert!(
            Router::load(&path)
                .unwrap_err()
                .to_string()
                .contains("not a routeval router file")
        );
        std::fs::write(&path, b"RVROUTE1\x00\x00\x10\x00").unwrap();
        assert!(
            Router::load(&path)
                .unwrap_err()
                .to_string()
                .contains("retrain it with `routeval router train`")
        );
    }

    #[test]
    fn stored_scores_read_back_as_the_same_f32() {
        for score in [0.441_636_98f32, 1.0 / 3.0, -0.25, 1e-7] {
            let stored = stored_score(score);
            assert_eq!(stored as f32, score);
            assert!(stored.to_string().len() <= score.to_string().len() + 1);
        }
        assert_eq!(stored_score(0.441_636_98).to_string(), "0.44163698");
    }
}
