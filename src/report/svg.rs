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

#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
    pub rules: Vec<Rule>,
}

const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
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
        let xs = self
            .series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.0));
        let ys = self
            .series
            .iter()
            .flat_map(|series| series.points.iter().map(|point| point.1));
        let (x_low, x_high) =
            bounds(xs.chain(self.markers.iter().map(|marker| marker.x))).unwrap_or((0.0, 1.0));
        let (y_low, y_high) = bounds(
            ys.chain(self.markers.iter().map(|marker| marker.y))
                .chain(self.rules.iter().map(|rule| rule.y)),
        )
        .unwrap_or((0.0, 1.0));
        let plot_width = WIDTH - LEFT - RIGHT;
        let plot_height = HEIGHT - TOP - BOTTOM;
        let x_of = |x: f64| LEFT + (x - x_low) / (x_high - x_low) * plot_width;
        let y_of = |y: f64| TOP + plot_height - (y - y_low) / (y_high - y_low) * plot_height;

        let mut svg = String::new();
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
        for tick in ticks(x_low, x_high) {
            let x = x_of(tick);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
                TOP + plot_height,
                TOP + plot_height + 16.0,
                format_tick(tick)
            );
        }
        for tick in ticks(y_low, y_high) {
            let y = y_of(tick);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                LEFT + plot_width,
                LEFT - 6.0,
                y + 4.0,
                format_tick(tick)
            );
        }
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_width}" height="{plot_height}" fill="none" stroke="#999999"/>"##
        );
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis">{}</text>"#,
            LEFT + plot_width / 2.0,
            HEIGHT - 10.0,
            escape(&self.x_label)
        );
        let _ = write!(
            svg,
            r#"<text x="14" y="{:.1}" text-anchor="middle" class="axis" transform="rotate(-90 14 {:.1})">{}</text>"#,
            TOP + plot_height / 2.0,
            TOP + plot_height / 2.0,
            escape(&self.y_label)
        );
        for rule in &self.rules {
            let y = y_of(rule.y);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                LEFT + plot_width,
                LEFT + plot_width - 4.0,
                y - 4.0,
                escape(&rule.label)
            );
        }
        for series in &self.series {
            let points: Vec<String> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), y_of(y)))
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
        for marker in &self.markers {
            let (x, y) = (x_of(marker.x), y_of(marker.y));
            // Labels of markers near the right edge go to their left.
            let (label_x, anchor) = if x > LEFT + plot_width * 0.7 {
                (x - 9.0, "end")
            } else {
                (x + 9.0, "start")
            };
            let _ = write!(
                svg,
                r##"<circle cx="{x:.1}" cy="{y:.1}" r="6" fill="{}" stroke="#222222"/><text x="{label_x:.1}" y="{:.1}" text-anchor="{anchor}" class="marker">{}</text>"##,
                marker.color,
                y - 8.0,
                escape(&marker.label)
            );
        }
        // Legend, above the plot on the right.
        for (index, series) in self.series.iter().enumerate() {
            let y = 14.0 + index as f64 * 13.0;
            let x = WIDTH - RIGHT - 120.0;
            let _ = write!(
                svg,
                r#"<rect x="{x:.1}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"#,
                y - 4.0,
                series.color,
                x + 18.0,
                y + 1.0,
                escape(&series.name)
            );
        }
        svg.push_str("</svg>");
        svg
    }
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
    let left = 140.0;
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
