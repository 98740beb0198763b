//! `routeval report`: what a reviewer reads before approving a route change.
//! From the graded results, and optionally a calibration, a gate report and a
//! drift document, it writes a self-contained HTML file with SVG charts (per
//! slice: the cost–quality curve with always-small, always-large, the oracle
//! and the chosen threshold; quality, cost and escalation by threshold;
//! cascade against predictive; drift) and the tables behind them, plus a
//! Markdown summary for the pull request. A replica-routing replay
//! (`--replay`) and what request records said (`--records`: drift per
//! window, replayed breakers, hedging) add sections of their own, or make a
//! report on their own. With the deployed config
//! (`--baseline`), both lead with the change: per slice, before and after.

mod change;
mod curves;
mod html;
mod markdown;
mod records;
mod replay;
mod svg;

/// How every report page begins: the generator named where the next report
/// can tell the file is its own.
pub const PAGE_START: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"generator\" content=\"routeval\">";

/// The first line of every `summary.md`: invisible where Markdown is
/// rendered, and how the next report knows the file as its own.
pub const SUMMARY_MARKER: &str = "<!-- routeval report summary -->\n";

/// What `report --out` writes as `report.html`.
pub const REPORT_HTML_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a report page",
    crate::atomic::Replaces::Prefix(PAGE_START.as_bytes()),
);

/// What `report --out` writes as `summary.md`.
pub const REPORT_SUMMARY_OUTPUT: crate::atomic::OutputKind = crate::atomic::OutputKind::new(
    "a report summary",
    crate::atomic::Replaces::Prefix(SUMMARY_MARKER.as_bytes()),
);

pub use change::{Change, ChangeRows, SliceChange, change, proposed_from_calibration};
pub use curves::{SliceCurves, slice_curves};
pub use html::{ReportInputs, render};
pub use markdown::summary;
pub use records::{RecordsDocuments, records_page, records_section, records_summary};
pub use replay::{replay_page, replay_summary};
pub use svg::{Chart, Marker, Rule, Series, Style, escape};
