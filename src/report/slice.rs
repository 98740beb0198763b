//! One slice's part of the HTML report: the cost–quality chart over every
//! threshold (with the baselines, the chosen points, the deployed-to-
//! proposed arrow and the k-tier frontiers), and each policy's threshold
//! charts and numbers.

use std::fmt::Write;

use super::curves::SliceCurves;
use super::kit::{
    BLACK, BLUE, GREEN, GREY, OLIVE, ORANGE, PURPLE, RED, ReportInputs, TABLE_ROWS, TEAL,
    calibration_name, chosen_color, curve_points, table, threshold_text, tier_path,
};
use super::svg::{Arrow, Chart, Marker, Rule, Series, Style, Vertical, escape};
use crate::policy::{Curve, Totals, thin};
use crate::schema::{CalibrationDocument, Policy, SliceCalibration};

/// The policies that need no threshold, as points of the cost–quality
/// chart.
fn baseline_markers(totals: &crate::policy::Totals) -> Vec<Marker> {
    let n = totals.rows as f64;
    let per_thousand = |picodollars: i128| picodollars as f64 / 1e12 / n * 1000.0;
    vec![
        Marker {
            label: "always small".to_owned(),
            color: GREY,
            x: per_thousand(totals.cost_small),
            y: totals.small_ok as f64 / n,
        },
        Marker {
            label: "always large".to_owned(),
            color: RED,
            x: per_thousand(totals.cost_large),
            y: totals.large_ok as f64 / n,
        },
        Marker {
            label: "oracle".to_owned(),
            color: GREEN,
            x: per_thousand(totals.oracle_cost),
            y: totals.either_ok as f64 / n,
        },
    ]
}

/// A target line, once per target.
fn add_target(rules: &mut Vec<Rule>, target: f64) {
    if !rules.iter().any(|rule| rule.y == target) {
        rules.push(Rule {
            label: format!("target {target}"),
            y: target,
        });
    }
}

/// The deployed config's point and the proposal's, joined by an arrow.
fn change_markers(
    inputs: &ReportInputs<'_>,
    slice_name: &str,
    markers: &mut Vec<Marker>,
) -> Vec<Arrow> {
    let mut arrows = Vec::new();
    if let Some(moved) = inputs.change.and_then(|change| {
        change
            .slices
            .iter()
            .find(|slice| slice.slice == slice_name)
            .map(|slice| (change.deployed_version, slice))
    }) {
        let (version, slice) = moved;
        let from = (slice.before.mean_cost * 1000.0, slice.before.quality);
        let to = (slice.after.mean_cost * 1000.0, slice.after.quality);
        markers.push(Marker {
            label: format!("deployed v{version}"),
            color: BLACK,
            x: from.0,
            y: from.1,
        });
        markers.push(Marker {
            label: "proposed".to_owned(),
            color: ORANGE,
            x: to.0,
            y: to.1,
        });
        arrows.push(Arrow { from, to });
    }
    arrows
}

/// Each calibration of more than two tiers as its frontier, with its chosen
/// point and its target.
fn tiered_frontiers(
    inputs: &ReportInputs<'_>,
    slice_name: &str,
    rules: &mut Vec<Rule>,
    markers: &mut Vec<Marker>,
) -> Vec<Series> {
    let mut tiered_series = Vec::new();
    for calibration in inputs.tiered {
        let Some(slice) = calibration
            .slices
            .iter()
            .find(|slice| slice.slice == slice_name)
        else {
            continue;
        };
        let Some(tiered) = &slice.tiered else {
            continue;
        };
        add_target(rules, calibration.target);
        let name = format!("{} {}", calibration.policy.name(), tier_path(calibration));
        let color = match calibration.policy {
            Policy::Predictive => TEAL,
            Policy::Cascade => OLIVE,
        };
        tiered_series.push(Series {
            name: name.clone(),
            color,
            style: match calibration.policy {
                Policy::Predictive => Style::Line,
                Policy::Cascade => Style::Dashed,
            },
            points: tiered
                .frontier
                .iter()
                .map(|point| (point.mean_cost * 1000.0, point.quality))
                .collect(),
        });
        if let (Some(quality), Some(cost)) = (slice.quality, slice.mean_cost) {
            markers.push(Marker {
                label: format!("chosen {name}"),
                color,
                x: cost * 1000.0,
                y: quality,
            });
        }
    }
    tiered_series
}

pub(super) fn slice_section(out: &mut String, inputs: &ReportInputs<'_>, curves: &SliceCurves) {
    let totals = &curves.totals;
    let calibrated: Vec<(&CalibrationDocument, &SliceCalibration)> = inputs
        .calibrations
        .iter()
        .filter_map(|calibration| {
            calibration
                .slices
                .iter()
                .find(|slice| slice.slice == curves.slice)
                .map(|slice| (calibration, slice))
        })
        .collect();
    let named = calibrated.len() > 1;
    let _ = write!(
        out,
        "<h2>Slice <code>{}</code></h2><div class=\"charts\">",
        escape(&curves.slice)
    );

    let mut markers = baseline_markers(totals);
    let mut rules: Vec<Rule> = Vec::new();
    chosen_markers(&calibrated, named, &mut markers, &mut rules);
    let arrows = change_markers(inputs, &curves.slice, &mut markers);
    let tiered_series = tiered_frontiers(inputs, &curves.slice, &mut rules, &mut markers);
    let series = drawn_curves(inputs, curves);
    let cost_quality = Chart {
        title: "Cost and quality over every threshold".to_owned(),
        x_label: "$ per 1,000 requests".to_owned(),
        y_label: "quality".to_owned(),
        series: series.into_iter().chain(tiered_series).collect(),
        markers,
        rules: rules.clone(),
        arrows,
        verticals: Vec::new(),
    };
    out.push_str(&cost_quality.to_svg());

    // The threshold charts and numbers of each calibrated policy, or of the
    // predictive one when nothing is calibrated; each marks the thresholds
    // its policy's calibrations chose.
    let mut policies: Vec<Policy> = Vec::new();
    for (calibration, _) in &calibrated {
        if !policies.contains(&calibration.policy) {
            policies.push(calibration.policy);
        }
    }
    if policies.is_empty() {
        policies.extend(
            [Policy::Predictive, Policy::Cascade]
                .into_iter()
                .filter(|&policy| inputs.drawn.policy(policy))
                .take(1),
        );
    }
    let chosen = chosen_thresholds(&calibrated, named);
    let numbers = policy_charts(out, &policies, &chosen, policies.len() > 1, curves, &rules);
    out.push_str("</div>");
    out.push_str(&numbers);
}

/// Each calibration's chosen point, in its own colour, and its target.
fn chosen_markers(
    calibrated: &[(&CalibrationDocument, &SliceCalibration)],
    named: bool,
    markers: &mut Vec<Marker>,
    rules: &mut Vec<Rule>,
) {
    for (calibration, slice) in calibrated {
        add_target(rules, calibration.target);
        if let (Some(quality), Some(cost), Some(threshold)) =
            (slice.quality, slice.mean_cost, slice.threshold)
        {
            let policy = if named {
                format!("{} ", calibration_name(calibration))
            } else {
                String::new()
            };
            markers.push(Marker {
                label: format!("chosen {policy}t = {}", short(threshold.0)),
                color: chosen_color(calibration),
                x: cost * 1000.0,
                y: quality,
            });
        }
    }
}

/// Each evaluated policy's two-tier curve over every threshold.
fn drawn_curves(inputs: &ReportInputs<'_>, curves: &SliceCurves) -> Vec<Series> {
    let rows = curves.totals.rows;
    [
        (Policy::Predictive, &curves.predictive, BLUE, Style::Line),
        (Policy::Cascade, &curves.cascade, PURPLE, Style::Dashed),
    ]
    .into_iter()
    .filter(|(policy, ..)| inputs.drawn.policy(*policy))
    .map(|(policy, curve, color, style)| Series {
        name: policy.name().to_owned(),
        color,
        style,
        points: curve_points(curve, |c| c.mean_cost(rows) * 1000.0, |c| c.quality(rows)),
    })
    .collect()
}

/// Each calibration's finite chosen threshold, as a vertical line for its
/// policy's threshold charts.
fn chosen_thresholds(
    calibrated: &[(&CalibrationDocument, &SliceCalibration)],
    named: bool,
) -> Vec<(Policy, Vertical)> {
    calibrated
        .iter()
        .filter_map(|(calibration, slice)| {
            let threshold = slice.threshold?.0;
            threshold.is_finite().then(|| {
                let name = if named {
                    format!(" {}", calibration_name(calibration))
                } else {
                    String::new()
                };
                (
                    calibration.policy,
                    Vertical {
                        label: format!("chosen{name} {}", short(threshold)),
                        color: chosen_color(calibration),
                        x: threshold,
                    },
                )
            })
        })
        .collect()
}

/// A threshold as a label shows it: four significant digits.
fn short(threshold: f64) -> String {
    if threshold == f64::INFINITY {
        return "inf".into();
    }
    let text = format!("{threshold:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Each policy's threshold charts (into `out`), and the numbers behind
/// them, folded, for after the charts.
fn policy_charts(
    out: &mut String,
    policies: &[Policy],
    chosen: &[(Policy, Vertical)],
    named: bool,
    curves: &SliceCurves,
    rules: &[Rule],
) -> String {
    let totals = &curves.totals;
    let n = totals.rows as f64;
    let per_thousand = |picodollars: i128| picodollars as f64 / 1e12 / n * 1000.0;
    let mut numbers = String::new();
    for &policy in policies {
        let curve = match policy {
            Policy::Predictive => &curves.predictive,
            Policy::Cascade => &curves.cascade,
        };
        let verticals: Vec<Vertical> = chosen
            .iter()
            .filter(|(of, _)| *of == policy)
            .map(|(_, vertical)| vertical.clone())
            .collect();
        threshold_charts(out, policy, curve, totals, rules, &verticals);
        let named_policy = if named {
            format!("{}, ", policy.name())
        } else {
            String::new()
        };
        let _ = write!(
            numbers,
            "<details><summary>Numbers behind the charts ({named_policy}{} of {} thresholds)</summary>",
            curve.candidates.len().min(TABLE_ROWS),
            curve.candidates.len()
        );
        let rows = thin(&curve.candidates, TABLE_ROWS)
            .into_iter()
            .map(|candidate| {
                vec![
                    threshold_text(candidate.threshold),
                    format!("{:.4}", candidate.quality(totals.rows)),
                    format!("{:.4}", candidate.mean_cost(totals.rows) * 1000.0),
                    format!("{:.1}%", candidate.escalation_rate(totals.rows) * 100.0),
                ]
            });
        table(
            &mut numbers,
            &["threshold", "quality", "$/1k req", "escalated"],
            rows,
        );
        table(
            &mut numbers,
            &["baseline", "quality", "$/1k req"],
            [
                ("always small", totals.small_ok, totals.cost_small),
                ("always large", totals.large_ok, totals.cost_large),
                ("oracle", totals.either_ok, totals.oracle_cost),
            ]
            .into_iter()
            .map(|(name, successes, cost)| {
                vec![
                    name.to_owned(),
                    format!("{:.4}", successes as f64 / n),
                    format!("{:.4}", per_thousand(cost)),
                ]
            }),
        );
        numbers.push_str("</details>");
    }
    numbers
}

/// Quality, escalation and cost by threshold of one policy's curve.
fn threshold_charts(
    out: &mut String,
    policy: Policy,
    curve: &Curve,
    totals: &Totals,
    rules: &[Rule],
    verticals: &[Vertical],
) {
    let finite = Curve {
        rows: curve.rows,
        audited: curve.audited,
        audit_weight: curve.audit_weight,
        audit_weight_squared: curve.audit_weight_squared,
        candidates: curve
            .candidates
            .iter()
            .copied()
            .filter(|c| c.threshold.is_finite())
            .collect(),
    };
    let by_threshold = Chart {
        title: format!("Quality and escalation by threshold ({})", policy.name()),
        x_label: "threshold (escalate when score >= threshold)".to_owned(),
        y_label: "share of requests".to_owned(),
        series: vec![
            Series {
                name: "quality".to_owned(),
                color: BLUE,
                style: Style::Line,
                points: curve_points(&finite, |c| c.threshold, |c| c.quality(totals.rows)),
            },
            Series {
                name: "escalation rate".to_owned(),
                color: ORANGE,
                style: Style::Line,
                points: curve_points(&finite, |c| c.threshold, |c| c.escalation_rate(totals.rows)),
            },
        ],
        markers: Vec::new(),
        rules: rules.to_vec(),
        arrows: Vec::new(),
        verticals: verticals.to_vec(),
    };
    out.push_str(&by_threshold.to_svg());
    let cost_by_threshold = Chart {
        title: format!("Cost by threshold ({})", policy.name()),
        x_label: "threshold".to_owned(),
        y_label: "$ per 1,000 requests".to_owned(),
        series: vec![Series {
            name: "cost".to_owned(),
            color: GREEN,
            style: Style::Line,
            points: curve_points(
                &finite,
                |c| c.threshold,
                |c| c.mean_cost(totals.rows) * 1000.0,
            ),
        }],
        markers: Vec::new(),
        rules: Vec::new(),
        arrows: Vec::new(),
        verticals: verticals.to_vec(),
    };
    out.push_str(&cost_by_threshold.to_svg());
}
