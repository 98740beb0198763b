//! Tables on the terminal, one look for every command: sharp borders, the
//! first column left-aligned and the rest (or the columns a table names)
//! right-aligned.

use std::ops::RangeBounds;

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

pub fn table<S: Into<String>>(
    header: impl IntoIterator<Item = S>,
    rows: impl IntoIterator<Item = Vec<String>>,
) -> String {
    table_aligned(header, rows, 1..)
}

/// A table whose `right` columns are right-aligned, the others left.
pub fn table_aligned<S: Into<String>>(
    header: impl IntoIterator<Item = S>,
    rows: impl IntoIterator<Item = Vec<String>>,
    right: impl RangeBounds<usize>,
) -> String {
    let mut builder = Builder::default();
    builder.push_record(header.into_iter().map(Into::into));
    for row in rows {
        builder.push_record(row);
    }
    let mut table = builder.build();
    table
        .with(Style::sharp())
        .modify(Columns::new(right), Alignment::right());
    table.to_string()
}
