//! The records drift document on the terminal, or as Markdown: the same
//! tables.

use crate::schema::RecordsDriftDocument;

/// A window's length as `--window` would say it: whole seconds where it is
/// whole seconds, else milliseconds (a 500 ms window is not "0 s").
fn window_length(window_ms: i64) -> String {
    if window_ms % 1000 == 0 {
        format!("{} s", window_ms / 1000)
    } else {
        format!("{window_ms} ms")
    }
}

pub fn render_records(document: &RecordsDriftDocument, markdown: bool) -> String {
    // One model per table, drawn by either back end.
    let render = |(header, rows): (Vec<&str>, Vec<Vec<String>>)| {
        if markdown {
            let escape = |cells: &[String]| -> Vec<String> {
                cells
                    .iter()
                    .map(|cell| crate::markdown::text(cell))
                    .collect()
            };
            let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
            crate::markdown::table(&escape(&header), rows.iter().map(|row| escape(row)), ..0)
        } else {
            crate::terminal::table(header, rows) + "\n"
        }
    };
    let mut out = String::new();
    if markdown {
        out.push_str(&format!(
            "## Drift from request records: {}\n\n",
            document.verdict.name()
        ));
    }
    // An aggregated table's rows are (window, slice, route) groups, not
    // requests: what it holds is the sum of the requests it counts.
    let counted = if document.aggregated {
        let requests: u64 = document.slices.iter().map(|slice| slice.requests).sum();
        format!(
            "{requests} requests in {} aggregate rows",
            document.records.rows
        )
    } else {
        format!("{} records", document.records.rows)
    };
    out.push_str(&format!(
        "{}: {counted} of {} v{}, windows of {}\n\n",
        document.records.path,
        document.config.config_id,
        document.config.version,
        window_length(document.window_ms)
    ));
    if !document.records_left_out.is_empty() {
        let of: Vec<String> = document
            .records_left_out
            .iter()
            .map(|(name, count)| format!("{name} ({count})"))
            .collect();
        let of = of.join(", ");
        out.push_str(&format!(
            "left out, of other logical models: {}\n\n",
            if markdown {
                crate::markdown::text(&of)
            } else {
                of
            }
        ));
    }
    if !document.records_other_versions.is_empty() {
        let of: Vec<String> = document
            .records_other_versions
            .iter()
            .map(|(version, count)| format!("version {version} ({count})"))
            .collect();
        out.push_str(&format!(
            "left out, served by other config versions: {}\n\n",
            of.join(", ")
        ));
    }
    out.push_str(&render(document.slice_table()));
    out.push('\n');
    out.push_str(&render(document.route_table()));
    out.push_str(&format!("verdict: {}\n", document.verdict.name()));
    out
}
