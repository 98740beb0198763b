//! The HTML page's first screen: the [`Decision`] drawn as a signed-config
//! line, one row per candidate, the per-slice guarantee and the cost. Each
//! number's cell carries the document's value in full (`data-value`), so a
//! reader, or a test, can check the rounding against the documents.

use std::fmt::Write;

use super::decision::{Decision, Guarantee, Signed, Verdict, four_places};
use super::svg::escape;

pub(super) fn decision_section(out: &mut String, decision: &Decision) {
    out.push_str("<section id=\"decision\"><h2>Decision</h2>");
    signed_line(out, &decision.signed);
    if !decision.candidates.is_empty() {
        out.push_str("<div class=\"scroll\"><table id=\"candidates\"><tr><th>candidate</th><th>verdict</th><th>quality</th><th>$/1k req</th><th class=\"why\">why</th></tr>");
        for candidate in &decision.candidates {
            let class = match candidate.verdict {
                Verdict::Chosen => " class=\"chosen\"",
                Verdict::Passed => "",
                Verdict::Failed => " class=\"failed\"",
            };
            let _ = write!(
                out,
                "<tr{class}><td><code>{}</code></td><td>{}</td>{}{}<td class=\"why\">{}</td></tr>",
                escape(&candidate.name),
                candidate.verdict.name(),
                number(Some(candidate.quality), 4),
                number(Some(candidate.cost_per_1k), 4),
                escape(&candidate.reason)
            );
        }
        out.push_str("</table></div>");
    }
    if let Some(cost) = &decision.cost {
        let _ = write!(
            out,
            "<p id=\"cost\">Costs <span data-value=\"{}\">${:.4}</span> per 1,000 requests against <span data-value=\"{}\">${:.4}</span> for always-large on these rows: {:.1}% saved.</p>",
            cost.cost_per_1k,
            cost.cost_per_1k,
            cost.large_per_1k,
            cost.large_per_1k,
            cost.saved() * 100.0
        );
    }
    if let Some(running) = &decision.running {
        let _ = write!(
            out,
            "<p id=\"running\">Against the running config, version {} (<code>{}</code>), on the gate's rows: quality {} → {:.4}, $/1k req {} → {:.4}.</p>",
            running.version,
            escape(&running.path),
            four_places(running.quality_before),
            running.quality_after,
            four_places(running.cost_before_per_1k),
            running.cost_after_per_1k
        );
    }
    if let Some(guarantee) = &decision.guarantee {
        out.push_str("<h3>What is guaranteed, per slice</h3>");
        let _ = write!(out, "<p>{}, ", escape(&capitalised(&guarantee.source)));
        guarantee_table(out, guarantee, "guarantee");
    }
    for (index, certified) in decision.certified.iter().enumerate() {
        let _ = write!(
            out,
            "<h3>{}</h3><p>The calibration's own thresholds, ",
            escape(&capitalised(&certified.source))
        );
        guarantee_table(out, certified, &format!("certified-{index}"));
    }
    out.push_str("</section>");
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

fn signed_line(out: &mut String, signed: &Signed) {
    match signed {
        Signed::Config {
            file,
            config_id,
            version,
            sha256,
            expires_at,
        } => {
            let _ = write!(
                out,
                "<p id=\"signed\" class=\"ok\">Signed <code>{}</code>: {}version {version}, sha256 <code>{}</code>, {}.</p>",
                escape(file),
                if config_id.is_empty() {
                    String::new()
                } else {
                    format!("<code>{}</code> ", escape(config_id))
                },
                escape(sha256),
                match expires_at {
                    Some(at) => format!("expires {}", escape(at)),
                    None => "expiry not read (the file is not here, or not the one signed)".into(),
                }
            );
        }
        Signed::Unsigned { chosen } => {
            let _ = write!(
                out,
                "<p id=\"signed\" class=\"watch\">Chose <code>{}</code> and signed nothing: the gate ran without a key.</p>",
                escape(chosen)
            );
        }
        Signed::NothingPassed { candidates } => {
            let _ = write!(
                out,
                "<p id=\"signed\" class=\"rejected\">Nothing signed: none of the {candidates} candidates passed every rule.</p>"
            );
        }
        Signed::NoGate => out.push_str(
            "<p id=\"signed\">No gate report: these are a calibration's thresholds, not a signed config.</p>",
        ),
    }
}

/// The rest of the paragraph its caller opened, then the table.
fn guarantee_table(out: &mut String, guarantee: &Guarantee, id: &str) {
    let _ = write!(
        out,
        "target {}{}.</p>",
        guarantee.target,
        guarantee
            .confidence
            .map(|c| format!("; lower bounds at confidence {c}"))
            .unwrap_or_else(|| "; no lower bounds (not certified)".into())
    );
    let _ = write!(
        out,
        "<div class=\"scroll\"><table id=\"{id}\"><tr><th>slice</th><th>n</th><th>threshold</th><th>quality</th><th>lower bound</th><th>$/1k req</th><th>saved vs large</th><th class=\"why\">note</th></tr>"
    );
    for row in &guarantee.rows {
        let class = if row.lower_bound.is_none() && guarantee.confidence.is_some() {
            " class=\"watch\""
        } else {
            ""
        };
        let _ = write!(
            out,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td>{}{}{}{}<td class=\"why\">{}</td></tr>",
            escape(&row.slice),
            row.n,
            escape(&row.threshold),
            number(row.quality, 4),
            number(row.lower_bound, 4),
            number(row.cost_per_1k, 4),
            match row.saved_vs_large {
                Some(saved) => format!("<td data-value=\"{saved}\">{:.1}%</td>", saved * 100.0),
                None => "<td>-</td>".into(),
            },
            escape(&row.note)
        );
    }
    out.push_str("</table></div>");
}

/// A number's cell: rounded for the eye, whole in `data-value`.
fn number(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(value) => format!("<td data-value=\"{value}\">{value:.digits$}</td>"),
        None => "<td>-</td>".into(),
    }
}
