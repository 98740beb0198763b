//! Which pipeline calibrates a graded-results file: the two-tier sweep, or
//! the search over k tiers, chosen by the tiers the file has.

use std::path::Path;

use crate::schema::{CalibrationDocument, ColumnNames, ReadOptions, tiers_in_metadata};

use super::engine::calibrate_two_tiers;
use super::error::CalibrateError;
use super::options::CalibrateOptions;
use super::tiered::calibrate_tiered;

/// Calibrates every slice of the graded results at `results`, whose score
/// and slice columns are `names`: over `options.tiers`, else the tiers the
/// file's metadata names, else small and large.
pub fn calibrate(
    results: &Path,
    names: ColumnNames,
    options: &CalibrateOptions,
) -> Result<CalibrationDocument, CalibrateError> {
    if options.grid < 2 {
        return Err(CalibrateError::Grid(options.grid));
    }
    let tiers = match &options.tiers {
        Some(tiers) => Some(tiers.clone()),
        None => tiers_in_metadata(results)?,
    };
    match tiers {
        Some(tiers) if tiers.len() > 2 && options.audits.is_some() => {
            Err(CalibrateError::AuditsOverTiers(tiers.len()))
        }
        Some(tiers) if tiers.len() > 2 => {
            calibrate_tiered(results, names, &tiers, options.grid, options)
        }
        _ if options.order_from.is_some() => Err(CalibrateError::OrderFromTwoTiers),
        // Two tiers by other names are the two-tier table with its columns
        // renamed.
        tiers => {
            let names = match tiers {
                Some(tiers) => tiers.column_names(names),
                None => names,
            };
            calibrate_two_tiers(results, &ReadOptions::of(names), options)
        }
    }
}
