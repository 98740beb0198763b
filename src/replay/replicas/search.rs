//! The cache-aware router's thresholds and the endpoint picker's weights,
//! chosen on the trace: every point of a fixed grid is replayed on the first
//! half of the trace (by request count), the best point for the objective is
//! chosen there, and it is checked on the later half it never saw against
//! SGLang's defaults and every fixed policy.

use super::metrics::ratio;
use super::pool::{Pool, Simulation};
use super::smg::SmgPolicy;
use super::strategy::{PolicySpec, RouterRelease, Strategy};
use super::{Lane, Source, run_lanes};
use crate::schema::{Calibration, Chosen, Grid, Headline, Scored};

pub const CACHE_THRESHOLDS: [f64; 5] = [0.1, 0.3, 0.5, 0.7, 0.9];
pub const ABS_GAPS: [f64; 5] = [4.0, 8.0, 16.0, 32.0, 64.0];
pub const REL_GAPS: [f64; 5] = [1.1, 1.25, 1.5, 2.0, 3.0];
pub const WEIGHTS: [f64; 5] = [0.0, 1.0, 2.0, 3.0, 4.0];

/// Simulations run together in one pass over the trace; passes are
/// repeated so memory holds this many pools, not the whole grid.
const LANES_PER_PASS: usize = 64;

/// What the calibration optimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    /// The 95th percentile of time to first token: lower is better.
    P95Ttft,
    /// The share of prompt tokens served from cache: higher is better.
    HitRate,
}

impl Objective {
    pub fn name(self) -> &'static str {
        match self {
            Objective::P95Ttft => "p95-ttft",
            Objective::HitRate => "hit-rate",
        }
    }

    fn value(self, simulation: &Simulation) -> f64 {
        let totals = &simulation.totals;
        match self {
            Objective::P95Ttft => totals.ttft.quantile(0.95),
            Objective::HitRate => ratio(totals.cached_tokens, totals.prompt_tokens),
        }
    }

    /// Whether `a` is strictly better than `b`.
    fn better(self, a: f64, b: f64) -> bool {
        match self {
            Objective::P95Ttft => a < b,
            Objective::HitRate => a > b,
        }
    }

    /// Whether `a` beats `b` on the objective, or ties it and beats it on
    /// the other figure (hit rate for latency, p95 TTFT for hit rate).
    fn ranks_above(self, a: &Headline, b: &Headline) -> bool {
        if a.objective != b.objective {
            return self.better(a.objective, b.objective);
        }
        match self {
            Objective::P95Ttft => a.hit_rate > b.hit_rate,
            Objective::HitRate => a.ttft_p95_ms < b.ttft_p95_ms,
        }
    }
}

fn headline(objective: Objective, simulation: &Simulation) -> Headline {
    let totals = &simulation.totals;
    Headline {
        objective: objective.value(simulation),
        hit_rate: ratio(totals.cached_tokens, totals.prompt_tokens),
        ttft_p95_ms: totals.ttft.quantile(0.95),
        herding_s: totals.herding_us as f64 / 1e6,
    }
}

/// Searches both grids on the first half of the source and checks the
/// chosen points on the second half against `baselines` (the presets are
/// added when missing). The cache-aware grid is routeval's rule, or with
/// `release` that release of SGLang's router, whose defaults are then its
/// preset. What is printed for a router to run is a choice that held on
/// the held-out part, else its preset.
pub fn search_settings(
    source: &Source<'_>,
    pool: &Pool,
    baselines: &[PolicySpec],
    objective: Objective,
    release: Option<RouterRelease>,
) -> anyhow::Result<Calibration> {
    pool.check()?;
    let requests = source.for_each(|_| {})?;
    if requests < 2 {
        anyhow::bail!(
            "{}: --calibrate needs at least 2 requests, one to search on and one to hold out",
            source.describe()
        );
    }
    let split = requests / 2;
    let cache_aware = cache_aware_grid(release);
    let scorers = scorer_grid();
    let presets = [guard_preset(release), "scorer"];
    let baselines = with_presets(baselines, presets);
    let specs: Vec<&PolicySpec> = cache_aware
        .iter()
        .chain(&scorers)
        .chain(&baselines)
        .collect();
    let board = Scoreboard {
        headlines: replay_halves(source, pool, &specs, split, objective)?,
        specs,
        objective,
        baseline_start: cache_aware.len() + scorers.len(),
        presets: presets.map(|name| PolicySpec::parse(name).expect("the preset parses").strategy),
    };
    let scorer_start = cache_aware.len();
    let (cache_aware_choice, guard) = board.chosen(0..scorer_start, board.presets[0]);
    let (scorer_choice, weights) =
        board.chosen(scorer_start..board.baseline_start, board.presets[1]);
    // A choice that did not hold on the held-out part is shown, never
    // handed to a router: the preset is.
    let guard = if cache_aware_choice.wins_on_holdout {
        guard
    } else {
        board.presets[0]
    };
    let weights = if scorer_choice.wins_on_holdout {
        weights
    } else {
        board.presets[1]
    };
    let router_flags = match guard {
        Strategy::CacheAware {
            threshold,
            abs_gap,
            rel_gap,
        } => format!(
            "--cache-threshold {threshold} --balance-abs-threshold {abs_gap} --balance-rel-threshold {rel_gap}"
        ),
        Strategy::Sglang {
            release,
            threshold,
            abs_gap,
            rel_gap,
        } => release.flags(threshold, abs_gap, rel_gap),
        Strategy::Smg(SmgPolicy::CacheAware {
            threshold,
            abs_gap,
            rel_gap,
        }) => RouterRelease::Smg1_13.flags(threshold, abs_gap, rel_gap),
        _ => unreachable!("the cache-aware grid holds cache-aware policies"),
    };
    let Strategy::Scorer { prefix, queue, kv } = weights else {
        unreachable!("the scorer grid holds scorers")
    };
    let endpoint_picker = endpoint_picker_config(prefix, queue, kv);
    Ok(Calibration {
        objective: objective.name().to_owned(),
        train_requests: split,
        holdout_requests: requests - split,
        grid: Grid {
            cache_threshold: CACHE_THRESHOLDS.to_vec(),
            abs_gap: ABS_GAPS.to_vec(),
            rel_gap: REL_GAPS.to_vec(),
            prefix_weight: WEIGHTS.to_vec(),
            queue_weight: WEIGHTS.to_vec(),
            kv_weight: WEIGHTS.to_vec(),
            points: 2 * (cache_aware.len() + scorers.len()),
        },
        cache_aware: cache_aware_choice,
        scorer: scorer_choice,
        baselines: (board.baseline_start..board.specs.len())
            .map(|index| board.scored(index))
            .collect(),
        router: guard_preset(release).to_owned(),
        router_flags,
        endpoint_picker,
    })
}

fn cache_aware_grid(release: Option<RouterRelease>) -> Vec<PolicySpec> {
    let mut grid = Vec::new();
    for &threshold in &CACHE_THRESHOLDS {
        for &abs_gap in &ABS_GAPS {
            for &rel_gap in &REL_GAPS {
                grid.push(match release {
                    None => PolicySpec::cache_aware(threshold, abs_gap, rel_gap),
                    Some(release) => release.policy(threshold, abs_gap, rel_gap),
                });
            }
        }
    }
    grid
}

/// The cache-aware family's preset: SGLang's defaults as DOMAIN.md quotes
/// them for routeval's rule, or the release's own.
fn guard_preset(release: Option<RouterRelease>) -> &'static str {
    release.map_or("sglang", RouterRelease::name)
}

fn scorer_grid() -> Vec<PolicySpec> {
    let mut grid = Vec::new();
    for &prefix in &WEIGHTS {
        for &queue in &WEIGHTS {
            for &kv in &WEIGHTS {
                if prefix + queue + kv > 0.0 {
                    grid.push(PolicySpec::scorer(prefix, queue, kv));
                }
            }
        }
    }
    grid
}

/// The fixed policies to compare with, the two presets among them.
fn with_presets(baselines: &[PolicySpec], presets: [&str; 2]) -> Vec<PolicySpec> {
    let mut baselines = baselines.to_vec();
    for name in presets {
        let preset = PolicySpec::parse(name).expect("the preset parses");
        if !baselines
            .iter()
            .any(|policy| policy.strategy == preset.strategy && !policy.count_dispatched)
        {
            baselines.push(preset);
        }
    }
    baselines
}

/// Every spec replayed on both halves: headline 2i is spec i on the first
/// half, 2i + 1 on the second.
fn replay_halves(
    source: &Source<'_>,
    pool: &Pool,
    specs: &[&PolicySpec],
    split: u64,
    objective: Objective,
) -> anyhow::Result<Vec<Headline>> {
    let mut headlines: Vec<Headline> = Vec::with_capacity(specs.len() * 2);
    let all: Vec<(usize, bool)> = (0..specs.len())
        .flat_map(|index| [(index, false), (index, true)])
        .collect();
    for pass in all.chunks(LANES_PER_PASS) {
        let lanes = pass
            .iter()
            .map(|&(index, held_out)| Lane {
                simulation: Simulation::new(pool, specs[index].clone()),
                range: if held_out { split..u64::MAX } else { 0..split },
            })
            .collect();
        let (lanes, _) = run_lanes(source, lanes, &mut |_| {})?;
        headlines.extend(
            lanes
                .iter()
                .map(|lane| headline(objective, &lane.simulation)),
        );
    }
    Ok(headlines)
}

/// Every spec's headlines on both halves, and the choices made from them.
struct Scoreboard<'a> {
    specs: Vec<&'a PolicySpec>,
    headlines: Vec<Headline>,
    objective: Objective,
    /// Where the fixed policies start among the specs.
    baseline_start: usize,
    /// SGLang's defaults and the scorer's default weights.
    presets: [Strategy; 2],
}

impl Scoreboard<'_> {
    fn scored(&self, index: usize) -> Scored {
        Scored {
            name: self.specs[index].name.clone(),
            params: self.specs[index].params(),
            train: self.headlines[2 * index],
            holdout: self.headlines[2 * index + 1],
        }
    }

    /// The best of `range` on one half. Full ties go to the preset
    /// (SGLang's defaults, the scorer's default weights): a calibration
    /// moves a default only for a measured gain.
    fn best(&self, range: std::ops::Range<usize>, held_out: bool) -> usize {
        let preset = range
            .clone()
            .find(|&index| self.presets.contains(&self.specs[index].strategy))
            .unwrap_or(range.start);
        let headline = |index: usize| &self.headlines[2 * index + usize::from(held_out)];
        std::iter::once(preset)
            .chain(range)
            .reduce(|best, index| {
                if self.objective.ranks_above(headline(index), headline(best)) {
                    index
                } else {
                    best
                }
            })
            .expect("a non-empty grid")
    }

    /// The choice from `range`. It must beat its own family's preset and
    /// every fixed policy on the held-out part; the other family is shown
    /// beside it, not required.
    fn chosen(&self, range: std::ops::Range<usize>, preset: Strategy) -> (Chosen, Strategy) {
        let index = self.best(range.clone(), false);
        let holdout = self.headlines[2 * index + 1].objective;
        let wins_on_holdout = (self.baseline_start..self.specs.len())
            .filter(|&other| {
                let strategy = self.specs[other].strategy;
                let tunable = matches!(
                    strategy,
                    Strategy::CacheAware { .. }
                        | Strategy::Sglang { .. }
                        | Strategy::Smg(SmgPolicy::CacheAware { .. })
                        | Strategy::Scorer { .. }
                );
                !tunable || (strategy == preset && !self.specs[other].count_dispatched)
            })
            .all(|other| {
                !self
                    .objective
                    .better(self.headlines[2 * other + 1].objective, holdout)
            });
        let choice = Chosen {
            policy: self.scored(index),
            wins_on_holdout,
            best_on_holdout: self.scored(self.best(range, true)),
        };
        (choice, self.specs[index].strategy)
    }
}

/// The API version of the endpoint picker's configuration: the llm-d
/// router's, where the Gateway API Inference Extension's endpoint picker
/// and its `EndpointPickerConfig` moved (`inference.networking.x-k8s.io`
/// before).
pub const ENDPOINT_PICKER_API_VERSION: &str = "llm-d.ai/v1alpha1";

/// The scorer as an endpoint-picker configuration: one scheduling profile
/// whose scorers carry the weights (as floats), picked by the highest
/// score; a zero weight leaves its scorer out.
pub fn endpoint_picker_config(prefix: f64, queue: f64, kv: f64) -> String {
    let scorers: Vec<(&str, f64)> = [
        ("prefix-cache-scorer", prefix),
        ("queue-scorer", queue),
        ("kv-cache-utilization-scorer", kv),
    ]
    .into_iter()
    .filter(|&(_, weight)| weight > 0.0)
    .collect();
    let mut yaml = format!(
        "apiVersion: {ENDPOINT_PICKER_API_VERSION}\nkind: EndpointPickerConfig\nplugins:\n- type: single-profile-handler\n"
    );
    for (name, _) in &scorers {
        yaml.push_str(&format!("- type: {name}\n"));
    }
    yaml.push_str("- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n");
    for (name, weight) in &scorers {
        yaml.push_str(&format!("  - pluginRef: {name}\n    weight: {weight:?}\n"));
    }
    yaml.push_str("  - pluginRef: max-score-picker\n");
    yaml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_weight_leaves_its_scorer_out_of_the_picker_config() {
        let yaml = endpoint_picker_config(3.0, 0.0, 2.0);
        assert!(yaml.contains("pluginRef: prefix-cache-scorer\n    weight: 3.0\n"));
        assert!(yaml.contains("pluginRef: kv-cache-utilization-scorer\n    weight: 2.0\n"));
        assert!(!yaml.contains("queue-scorer"));
    }
}
