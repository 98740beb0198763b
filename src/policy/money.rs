//! Money in exact integer picodollars.

/// Costs are summed in integer picodollars (10⁻¹² USD) so that sums do not
/// depend on their order and equal costs compare equal.
pub const PICODOLLARS_PER_USD: f64 = 1.0e12;

pub fn to_picodollars(usd: f64) -> i64 {
    (usd * PICODOLLARS_PER_USD).round() as i64
}

pub fn to_usd(picodollars: i128) -> f64 {
    picodollars as f64 / PICODOLLARS_PER_USD
}
