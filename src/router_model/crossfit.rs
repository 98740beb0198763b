//! Scores no prompt's own label shaped: the deployed model's on a
//! calibration part it was not fitted on (what a certificate rests on), and
//! out-of-fold scores, each prompt scored by a model trained on the other
//! folds only (for choosing features and reporting, never for certifying).

use super::features::{Features, featurise};
use super::model::{Outcome, Router, Training, TrainingSet};

/// A labelled prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledPrompt {
    pub id: String,
    pub slice: String,
    pub prompt: String,
    pub outcome: Outcome,
}

/// The prompts labelled as if the large tier were always right, so the
/// router's gain is the small tier's failure alone: the peer the router's
/// routing quality is measured against.
pub fn small_failure_only(prompts: &[LabelledPrompt]) -> Vec<LabelledPrompt> {
    prompts
        .iter()
        .cloned()
        .map(|mut prompt| {
            prompt.outcome.large_ok = true;
            prompt
        })
        .collect()
}

/// The fold of a prompt: a fixed hash of its text, so folds survive
/// reordering the file, and the same question asked under several ids lands
/// in one fold (otherwise its copies would teach the model its label).
pub fn fold_of(prompt: &str, folds: usize) -> usize {
    (crate::stats::random::fnv1a(prompt.as_bytes()) % folds as u64) as usize
}

/// Whether a prompt falls in the calibration part: a fixed hash of its text
/// (salted apart from [`fold_of`]), so the split survives reordering the
/// file and the same question asked under several ids lands on one side.
pub fn in_calibration_part(prompt: &str, calibration_share: f64) -> bool {
    const SALT: u64 = 0x6361_6c69_6272_6174;
    let hash = crate::stats::random::fnv1a(prompt.as_bytes());
    crate::stats::random::unit_of(crate::stats::random::finalise(hash ^ SALT)) < calibration_share
}

/// A router fitted on the training part, and what it and cross-fitting say.
#[derive(Debug, Clone)]
pub struct Split {
    /// The model to deploy, fitted on the training part alone, with its
    /// training set.
    pub router: Router,
    /// Indices (input order) of the calibration part.
    pub calibration: Vec<usize>,
    /// The deployed router's scores of the calibration part, in its order.
    pub calibration_scores: Vec<f32>,
    /// Indices of the training part.
    pub training: Vec<usize>,
    /// Out-of-fold scores of the training part, in its order (`None` when
    /// it has fewer prompts than folds).
    pub cross_fitted: Option<Vec<f32>>,
}

/// How many folds a cross-fit has: from 2 (one to fit, one to score) to
/// [`Folds::MAX`], since each fold trains a model and more is a typo, not a
/// plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folds(usize);

impl Folds {
    pub const MAX: usize = 100;

    pub fn get(self) -> usize {
        self.0
    }
}

impl std::str::FromStr for Folds {
    type Err = String;

    fn from_str(given: &str) -> Result<Self, String> {
        match given.parse::<usize>() {
            Ok(folds) if (2..=Self::MAX).contains(&folds) => Ok(Self(folds)),
            _ => Err(format!("{given}: folds are from 2 to {}", Self::MAX)),
        }
    }
}

impl std::fmt::Display for Folds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Splits the prompts by [`in_calibration_part`], fits the router on the
/// training part and scores the calibration part with it.
pub fn split_fit(
    prompts: &[LabelledPrompt],
    calibration_share: f64,
    folds: usize,
    training: &Training,
) -> Split {
    let (calibration, training_part): (Vec<usize>, Vec<usize>) = (0..prompts.len())
        .partition(|&index| in_calibration_part(&prompts[index].prompt, calibration_share));
    let fitted: Vec<LabelledPrompt> = training_part
        .iter()
        .map(|&index| prompts[index].clone())
        .collect();
    let cross_fitted = (fitted.len() >= folds).then(|| cross_fit(&fitted, folds, training).0);
    let features: Vec<Features> = fitted
        .iter()
        .map(|prompt| featurise(&prompt.prompt, &prompt.slice))
        .collect();
    let mut router = fit(&features, &fitted, training);
    router.trained_on = Some(TrainingSet::of(
        fitted.iter().map(|prompt| prompt.prompt.as_str()),
    ));
    let calibration_scores = calibration
        .iter()
        .map(|&index| router.score(&featurise(&prompts[index].prompt, &prompts[index].slice)))
        .collect();
    Split {
        router,
        calibration,
        calibration_scores,
        training: training_part,
        cross_fitted,
    }
}

/// Cross-fitted scores in input order, and the model trained on every row.
pub fn cross_fit(
    prompts: &[LabelledPrompt],
    folds: usize,
    training: &Training,
) -> (Vec<f32>, Router) {
    assert!(folds >= 2, "cross-fitting needs at least two folds");
    let features: Vec<Features> = prompts
        .iter()
        .map(|prompt| featurise(&prompt.prompt, &prompt.slice))
        .collect();
    let fold: Vec<usize> = prompts
        .iter()
        .map(|prompt| fold_of(&prompt.prompt, folds))
        .collect();
    let mut scores = vec![0.0f32; prompts.len()];
    for held_out in 0..folds {
        let training_set: Vec<(&Features, Outcome)> = (0..prompts.len())
            .filter(|&index| fold[index] != held_out)
            .map(|index| (&features[index], prompts[index].outcome))
            .collect();
        let router = Router::train(&training_set, training);
        for index in (0..prompts.len()).filter(|&index| fold[index] == held_out) {
            scores[index] = router.score(&features[index]);
        }
    }
    (scores, fit(&features, prompts, training))
}

/// The router fitted on every prompt, `features` being theirs.
fn fit(features: &[Features], prompts: &[LabelledPrompt], training: &Training) -> Router {
    let examples: Vec<(&Features, Outcome)> = features
        .iter()
        .zip(prompts)
        .map(|(features, prompt)| (features, prompt.outcome))
        .collect();
    Router::train(&examples, training)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployed_router_never_saw_the_calibration_part() {
        let mut random = crate::stats::Random::new(9);
        let prompts: Vec<LabelledPrompt> = (0..400)
            .map(|index| LabelledPrompt {
                id: format!("p{index}"),
                slice: "s".to_owned(),
                // Every text twice, under two ids: both copies on one side.
                prompt: format!("question {}", index / 2),
                outcome: Outcome {
                    small_ok: random.chance(0.5),
                    large_ok: true,
                },
            })
            .collect();
        let split = split_fit(&prompts, 0.5, 5, &Training::default());
        assert_eq!(split.calibration.len() + split.training.len(), 400);
        assert!((150..250).contains(&split.calibration.len()));
        let set = split.router.trained_on.as_ref().unwrap();
        assert_eq!(set.len(), split.training.len() / 2);
        for &index in &split.calibration {
            assert!(!set.contains(&prompts[index].prompt), "{index}");
        }
        for &index in &split.training {
            assert!(set.contains(&prompts[index].prompt), "{index}");
        }
        for (&index, &score) in split.calibration.iter().zip(&split.calibration_scores) {
            let prompt = &prompts[index];
            assert_eq!(
                split
                    .router
                    .score(&featurise(&prompt.prompt, &prompt.slice)),
                score
            );
        }
        assert_eq!(
            split.cross_fitted.as_ref().map(Vec::len),
            Some(split.training.len())
        );
    }

    #[test]
    fn folds_are_balanced_and_stable() {
        let mut counts = [0usize; 5];
        for index in 0..10_000 {
            counts[fold_of(&format!("prompt-{index}"), 5)] += 1;
        }
        assert!(
            counts.iter().all(|&count| (1_800..2_200).contains(&count)),
            "{counts:?}"
        );
        assert_eq!(fold_of("abc", 5), fold_of("abc", 5));
    }

    #[test]
    fn out_of_fold_scores_never_see_their_own_label() {
        // Each prompt is unique noise with a random label (the large tier
        // always passes, so the gain is the small tier's failure): a model
        // that saw the label would memorise it; out of fold it cannot.
        let mut random = crate::stats::Random::new(4);
        let prompts: Vec<LabelledPrompt> = (0..600)
            .map(|index| LabelledPrompt {
                id: format!("p{index}"),
                slice: "s".to_owned(),
                prompt: format!("token{} token{}", random.next_u64(), random.next_u64()),
                outcome: Outcome {
                    small_ok: random.chance(0.5),
                    large_ok: true,
                },
            })
            .collect();
        let (scores, full) = cross_fit(&prompts, 5, &Training::default());
        let accuracy = |scores: &[f32]| {
            scores
                .iter()
                .zip(&prompts)
                .filter(|(score, prompt)| (**score > 0.5) != prompt.outcome.small_ok)
                .count() as f64
                / prompts.len() as f64
        };
        let in_sample: Vec<f32> = prompts
            .iter()
            .map(|prompt| full.score(&featurise(&prompt.prompt, &prompt.slice)))
            .collect();
        assert!(accuracy(&in_sample) > 0.95, "the full model memorises");
        assert!(
            (accuracy(&scores) - 0.5).abs() < 0.1,
            "out of fold it is chance: {}",
            accuracy(&scores)
        );
    }

    #[test]
    fn copies_of_a_prompt_under_other_ids_share_a_fold() {
        // Every random question is asked three times under three ids. Were
        // folds by id, the copies in other folds would give its label away.
        let mut random = crate::stats::Random::new(9);
        let mut prompts = Vec::new();
        for question in 0..300 {
            let text = format!("token{} token{}", random.next_u64(), random.next_u64());
            let small_ok = random.chance(0.5);
            for copy in 0..3 {
                prompts.push(LabelledPrompt {
                    id: format!("q{question}-{copy}"),
                    slice: "s".to_owned(),
                    prompt: text.clone(),
                    outcome: Outcome {
                        small_ok,
                        large_ok: true,
                    },
                });
            }
        }
        let (scores, _) = cross_fit(&prompts, 5, &Training::default());
        let right = scores
            .iter()
            .zip(&prompts)
            .filter(|(score, prompt)| (**score > 0.5) != prompt.outcome.small_ok)
            .count();
        let accuracy = right as f64 / prompts.len() as f64;
        assert!((accuracy - 0.5).abs() < 0.1, "out of fold: {accuracy}");
    }
}
