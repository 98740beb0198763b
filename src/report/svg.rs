//! Small, dependency-free SVG charts: lines, points, bars and labelled
//! markers on linear axes with round ticks. Enough for the report, and
//! self-contained (no fonts or scripts to fetch).

use std::fmt::Write;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Line,
    Dashed,
    Points,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: &'static str,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
}

/// A labelled point drawn on top of the series.
#[derive(Debug, Clone)]
pub struct Marker {
    pub label: String,
    pub color: &'static str,
    pub x: f64,
    pub y: f64,
}

/// A horizontal reference line, such as a target.
#[derive(Debug, Clone)]
pub struct Rule {
    pub label: String,
    pub y: f64,
}

/// A vertical line at `x`, such as the chosen threshold, labelled at its
/// top and drawn in its marker's colour.
#[derive(Debug, Clone)]
pub struct Vertical {
    pub label: String,
    pub color: &'static str,
    pub x: f64,
}

/// An arrow from one point to another, such as from the deployed config's
/// point to the proposed one; both ends should also be markers.
#[derive(Debug, Clone, Copy)]
pub struct Arrow {
    pub from: (f64, f64),
    pub to: (f64, f64),
}

#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    pub rules: Vec<Rule>,
    pub arrows: Vec<Arrow>,
    pub verticals: Vec<Vertical>,
}

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
/// Room for the title, and below it the legend's row.
const TOP: f64 = 50.0;
/// Baseline of the legend's row, between the title and the plot.
const LEGEND_Y: f64 = 38.0;
/// Width of one character of 12px chart text, generously, for layout.
const CHAR_WIDTH: f64 = 7.0;
const BOTTOM: f64 = 52.0;

/// Escapes text for HTML and SVG.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Round tick positions covering `low..=high`.
fn ticks(low: f64, high: f64) -> Vec<f64> {
    let span = (high - low).max(f64::EPSILON);
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|step| span / step <= 6.0)
        .unwrap_or(10.0 * magnitude);
    let first = (low / step).ceil() as i64;
    let last = (high / step).floor() as i64;
    (first..=last).map(|index| index as f64 * step).collect()
}

fn format_tick(value: f64) -> String {
    let text = format!("{value:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

fn bounds(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (low, high) = values
        .filter(|value| value.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
            (low.min(value), high.max(value))
        });
    if !low.is_finite() {
        return None;
    }
    let pad = ((high - low) * 0.05).max(high.abs() * 0.01).max(1e-9);
    Some((low - pad, high + pad))
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let plot = self.plot();
        let mut svg = String::new();
        self.frame(&mut svg, &plot);
        self.rules_svg(&mut svg, &plot);
        self.series_svg(&mut svg, &plot);
        self.marks_svg(&mut svg, &plot);
        self.legend_svg(&mut svg);
        svg.push_str("</svg>");
        svg
    }

    /// The ranges the plot spans: every series' points, marker and rule.
    fn plot(&self) -> Plot {
        let xs = self
            .series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.0));
        let ys = self
            .series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.1));
        let (x_low, x_high) = bounds(
            xs.chain(self.markers.iter().map(|marker| marker.x))
                .chain(self.verticals.iter().map(|vertical| vertical.x)),
        )
        .unwrap_or((0.0, 1.0));
        let (y_low, y_high) = bounds(
            ys.chain(self.markers.iter().map(|marker| marker.y))
                .chain(self.rules.iter().map(|rule| rule.y)),
        )
        .unwrap_or((0.0, 1.0));
        Plot {
            x_low,
            x_high,
            y_low,
            y_high,
        }
    }

    /// The canvas, the title, the grid with its ticks, and the axes' labels.
    fn frame(&self, svg: &mut String, plot: &Plot) {
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{}">"#,
            escape(&self.title)
        );
        let _ = write!(
            svg,
            r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
        );
        let _ = write!(
            svg,
            r#"<text x="{LEFT}" y="22" class="title">{}</text>"#,
            escape(&self.title)
        );
        for tick in ticks(plot.x_low, plot.x_high) {
            let x = plot.x(tick);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
                TOP + PLOT_HEIGHT,
                TOP + PLOT_HEIGHT + 16.0,
                format_tick(tick)
            );
        }
        for tick in ticks(plot.y_low, plot.y_high) {
            let y = plot.y(tick);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                LEFT + PLOT_WIDTH,
                LEFT - 6.0,
                y + 4.0,
                format_tick(tick)
            );
        }
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" fill="none" stroke="#999999"/>"##
        );
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text>"#,
            LEFT + PLOT_WIDTH / 2.0,
            HEIGHT - 10.0,
            escape(&self.x_label)
        );
        let _ = write!(
            svg,
            r#"<text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">{}</text>"#,
            TOP + PLOT_HEIGHT / 2.0,
            TOP + PLOT_HEIGHT / 2.0,
            escape(&self.y_label)
        );
    }

    /// The horizontal rules (targets) and the vertical ones (chosen
    /// thresholds), each labelled; vertical labels stacked down the plot
    /// so that two close thresholds keep both labels readable.
    fn rules_svg(&self, svg: &mut String, plot: &Plot) {
        for (index, vertical) in self.verticals.iter().enumerate() {
            let x = plot.x(vertical.x);
            let (label_x, anchor) = if x > LEFT + PLOT_WIDTH * 0.6 {
                (x - 4.0, "end")
            } else {
                (x + 4.0, "start")
            };
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="{}" stroke-width="2" stroke-dasharray="3 3" class="chosen-threshold"/><text x="{label_x:.1}" y="{:.1}" text-anchor="{anchor}" class="marker" fill="{}">{}</text>"##,
                TOP + PLOT_HEIGHT,
                vertical.color,
                TOP + 14.0 + index as f64 * 16.0,
                vertical.color,
                escape(&vertical.label)
            );
        }
        for rule in &self.rules {
            let y = plot.y(rule.y);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                LEFT + PLOT_WIDTH,
                LEFT + PLOT_WIDTH - 4.0,
                y - 4.0,
                escape(&rule.label)
            );
        }
    }

    /// Each series as a line or as points.
    fn series_svg(&self, svg: &mut String, plot: &Plot) {
        for series in &self.series {
            let points: Vec<String> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", plot.x(x), plot.y(y)))
                .collect();
            match series.style {
                Style::Line | Style::Dashed => {
                    let dash = if series.style == Style::Dashed {
                        r#" stroke-dasharray="5 3""#
                    } else {
                        ""
                    };
                    let _ = write!(
                        svg,
                        r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2.5"{dash}/>"#,
                        points.join(" "),
                        series.color
                    );
                }
                Style::Points => {
                    for point in &points {
                        let (x, y) = point.split_once(',').expect("formatted as x,y");
                        let _ = write!(
                            svg,
                            r#"<circle cx="{x}" cy="{y}" r="3" fill="{}"/>"#,
                            series.color
                        );
                    }
                }
            }
        }
    }

    /// The arrows, then the markers with their placed labels.
    fn marks_svg(&self, svg: &mut String, plot: &Plot) {
        for arrow in &self.arrows {
            let (x1, y1) = (plot.x(arrow.from.0), plot.y(arrow.from.1));
            let (x2, y2) = (plot.x(arrow.to.0), plot.y(arrow.to.1));
            // Stop short of the target marker's circle, so the head shows.
            let length = (x2 - x1).hypot(y2 - y1);
            if length < 12.0 {
                continue;
            }
            let (x2, y2) = (x2 - (x2 - x1) * 9.0 / length, y2 - (y2 - y1) * 9.0 / length);
            let _ = write!(
                svg,
                r##"<defs><marker id="arrowhead" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#222222"/></marker></defs><line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="#222222" stroke-width="1.5" marker-end="url(#arrowhead)" class="change"/>"##
            );
        }
        let centres: Vec<(f64, f64)> = self
            .markers
            .iter()
            .map(|marker| (plot.x(marker.x), plot.y(marker.y)))
            .collect();
        let labels: Vec<&str> = self
            .markers
            .iter()
            .map(|marker| marker.label.as_str())
            .collect();
        let placed = place_labels(&centres, &labels, LEFT + PLOT_WIDTH * 0.7);
        for ((marker, &(x, y)), label) in self.markers.iter().zip(&centres).zip(&placed) {
            let _ = write!(
                svg,
                r##"<circle cx="{x:.1}" cy="{y:.1}" r="6" fill="{}" stroke="#222222"/><text x="{:.1}" y="{:.1}" text-anchor="{}" class="marker">{}</text>"##,
                marker.color,
                label.x,
                label.y,
                label.anchor,
                escape(&marker.label)
            );
        }
    }

    /// The legend.
    fn legend_svg(&self, svg: &mut String) {
        // Legend: one row between the title and the plot, so it never
        // covers either.
        let mut x = LEFT;
        for series in &self.series {
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"#,
                LEGEND_Y - 4.0,
                series.color,
                x + 16.0,
                LEGEND_Y + 1.0,
                escape(&series.name)
            );
            x += 16.0 + series.name.chars().count() as f64 * CHAR_WIDTH + 14.0;
        }
    }
}

/// The ranges a chart's plot spans, and where a value lands on the canvas.
struct Plot {
    x_low: f64,
    x_high: f64,
    y_low: f64,
    y_high: f64,
}

/// The plot's size inside the canvas's margins.
const PLOT_WIDTH: f64 = WIDTH - LEFT - RIGHT;
const PLOT_HEIGHT: f64 = HEIGHT - TOP - BOTTOM;

impl Plot {
    fn x(&self, x: f64) -> f64 {
        LEFT + (x - self.x_low) / (self.x_high - self.x_low) * PLOT_WIDTH
    }

    fn y(&self, y: f64) -> f64 {
        TOP + PLOT_HEIGHT - (y - self.y_low) / (self.y_high - self.y_low) * PLOT_HEIGHT
    }
}

/// Where a marker's label goes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LabelPlace {
    x: f64,
    y: f64,
    anchor: &'static str,
}

impl LabelPlace {
    /// The label's box: (left, top, right, bottom).
    fn bounds(&self, text: &str) -> (f64, f64, f64, f64) {
        let width = text.chars().count() as f64 * CHAR_WIDTH;
        let left = if self.anchor == "end" {
            self.x - width
        } else {
            self.x
        };
        (left, self.y - 12.0, left + width, self.y + 4.0)
    }
}

/// Places each marker's label beside its marker, above or below and
/// further out in turn, at the first spot that overlaps no label placed
/// before it. Labels of markers right of `right_side`, or that would run
/// past the plot's right edge, go to their left.
fn place_labels(centres: &[(f64, f64)], labels: &[&str], right_side: f64) -> Vec<LabelPlace> {
    let overlaps = |a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)| {
        a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
    };
    let mut placed: Vec<(LabelPlace, (f64, f64, f64, f64))> = Vec::new();
    for (&(x, y), label) in centres.iter().zip(labels) {
        let width = label.chars().count() as f64 * CHAR_WIDTH;
        let (label_x, anchor) = if x > right_side || x + 9.0 + width > LEFT + PLOT_WIDTH {
            (x - 9.0, "end")
        } else {
            (x + 9.0, "start")
        };
        let offsets = [-8.0, 18.0, -22.0, 32.0, -36.0, 46.0];
        let candidates = offsets.iter().map(|dy| LabelPlace {
            x: label_x,
            y: y + dy,
            anchor,
        });
        let mut chosen = None;
        for candidate in candidates {
            let bounds = candidate.bounds(label);
            if placed.iter().all(|(_, other)| !overlaps(bounds, *other)) {
                chosen = Some((candidate, bounds));
                break;
            }
        }
        let place = chosen.unwrap_or_else(|| {
            let fallback = LabelPlace {
                x: label_x,
                y: y - 8.0,
                anchor,
            };
            (fallback, fallback.bounds(label))
        });
        placed.push(place);
    }
    placed.into_iter().map(|(place, _)| place).collect()
}

/// Horizontal bars, one per label, for per-slice comparisons.
pub fn bars(
    title: &str,
    x_label: &str,
    rows: &[(String, Vec<(f64, &'static str)>)],
    rules: &[(f64, &str)],
) -> String {
    let row_height = 22.0;
    let height = TOP + rows.len() as f64 * row_height * 1.5 + BOTTOM;
    let high = rows
        .iter()
        .flat_map(|(_, values)| values.iter().map(|value| value.0))
        .chain(rules.iter().map(|rule| rule.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    // Room for the longest label, up to half the chart.
    let longest = rows
        .iter()
        .map(|(label, _)| label.chars().count())
        .max()
        .unwrap_or(0);
    let left = (longest as f64 * CHAR_WIDTH + 12.0).clamp(140.0, WIDTH / 2.0);
    let plot_width = WIDTH - left - RIGHT;
    let x_of = |x: f64| left + x / high * plot_width;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="{}"><rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/><text x="{LEFT}" y="22" class="title">{}</text>"##,
        escape(title),
        escape(title)
    );
    for tick in ticks(0.0, high) {
        let x = x_of(tick);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
            height - BOTTOM,
            height - BOTTOM + 16.0,
            format_tick(tick)
        );
    }
    for (index, (label, values)) in rows.iter().enumerate() {
        let y = TOP + index as f64 * row_height * 1.5;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"#,
            left - 6.0,
            y + row_height / 2.0 + 4.0,
            escape(label)
        );
        let bar_height = row_height / values.len().max(1) as f64;
        for (position, (value, color)) in values.iter().enumerate() {
            let _ = write!(
                svg,
                r#"<rect x="{left}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                y + position as f64 * bar_height,
                (x_of(*value) - left).max(0.5),
                bar_height - 1.0
            );
        }
    }
    for (value, label) in rules {
        let x = x_of(*value);
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
            height - BOTTOM,
            TOP - 4.0,
            escape(label)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text></svg>"#,
        left + plot_width / 2.0,
        height - 10.0,
        escape(x_label)
    );
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let unit: Vec<String> = ticks(0.0, 1.0).into_iter().map(format_tick).collect();
        assert_eq!(unit, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        let wide = ticks(0.37, 9.2);
        assert_eq!(wide, [2.0, 4.0, 6.0, 8.0]);
        assert_eq!(format_tick(0.30000000000000004), "0.3");
        assert_eq!(format_tick(-0.0), "0");
    }

    #[test]
    fn marker_labels_at_one_point_do_not_overlap() {
        // Two policies choosing points at the same quality, close in cost:
        // the demo's report drew their labels on top of each other.
        let centres = [(180.0, 200.0), (215.0, 200.0), (400.0, 60.0)];
        let labels = [
            "chosen cascade t = 0.965",
            "chosen predictive t = 0.44163698",
            "always large",
        ];
        let placed = place_labels(&centres, &labels, 392.0);
        let boxes: Vec<_> = placed
            .iter()
            .zip(labels)
            .map(|(place, label)| place.bounds(label))
            .collect();
        for (index, a) in boxes.iter().enumerate() {
            for b in &boxes[index + 1..] {
                let overlap = a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
                assert!(!overlap, "{a:?} overlaps {b:?}");
            }
        }
        assert_eq!(
            placed[2].anchor, "end",
            "labels near the right edge go left"
        );
    }

    #[test]
    fn the_legend_sits_below_the_title() {
        let chart = Chart {
            title: "Quality and escalation by threshold (cascade)".to_owned(),
            series: vec![
                Series {
                    name: "quality".to_owned(),
                    color: "#1f77b4",
                    style: Style::Line,
                    points: vec![(0.0, 1.0), (1.0, 0.7)],
                },
                Series {
                    name: "escalation rate".to_owned(),
                    color: "#ff7f0e",
                    style: Style::Line,
                    points: vec![(0.0, 1.0), (1.0, 0.0)],
                },
            ],
            ..Chart::default()
        };
        let svg = chart.to_svg();
        // The title's baseline is y = 22; every legend entry is on its own
        // row below it and above the plot.
        let entries: Vec<&str> = svg
            .split("<rect x=")
            .filter(|entry| entry.contains("width=\"12\""))
            .collect();
        assert_eq!(entries.len(), 2);
        for entry in entries {
            let y: f64 = entry
                .split("y=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .and_then(|value| value.parse().ok())
                .unwrap();
            assert!(y > 22.0 && y < TOP, "a legend entry at y = {y}");
        }
    }

    #[test]
    fn text_is_escaped() {
        let chart = Chart {
            title: "<script>alert(1)</script> & co".to_owned(),
            ..Chart::default()
        };
        let svg = chart.to_svg();
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"));
    }
}
