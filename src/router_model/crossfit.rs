//! Out-of-fold scores: every prompt is scored by a model trained on the
//! other folds only, so no prompt is scored by a model that saw its label.

use super::features::{Features, featurise};
use super::model::{Outcome, Router, Training};

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

/// Cross-fitted scores in input order, and the model trained on every row
/// (for scoring new prompts).
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
    let everything: Vec<(&Features, Outcome)> = features
        .iter()
        .zip(prompts)
        .map(|(features, prompt)| (features, prompt.outcome))
        .collect();
    (scores, Router::train(&everything, training))
}

#[cfg(test)]
mod tests {
    use super::*;

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
