//! Exact binomial statistics shared by the stages that certify quality:
//! one-sided binomial tests and Clopper–Pearson bounds, and the paired test
//! of a candidate against the deployed baseline on the same rows.

mod bernstein;
mod betting;
mod binomial;
mod multiplicity;
mod paired;
mod paired_score;
mod percentile;
mod ppi;
pub mod random;
mod shift;
mod stratified;

pub use bernstein::{empirical_bernstein_from_moments, empirical_bernstein_interval};
pub use betting::{BettingSequence, Side as BettingSide};
pub use binomial::{
    P_VALUE_SLACK, binomial_cdf, binomial_upper_tail, certifies, clopper_pearson_interval,
    clopper_pearson_lower, clopper_pearson_lower_real, max_certifiable_failures,
    min_rows_to_certify,
};
pub use multiplicity::{alarms, benjamini_hochberg, holm};
pub use paired::{
    Paired, PairedTest, Verdict as PairedVerdict, detectable_regression, mean_difference_interval,
    worse_by_more_than,
};
pub use percentile::{nearest_rank, percentile};
pub use ppi::Corrected;
pub use random::Random;
pub use shift::{
    PsiTest, homogeneity_p_value, kolmogorov_tail, ks_two_sample, psi, psi_null, psi_of_bins,
    psi_test, two_proportion_z, wilson,
};
pub use stratified::{StratifiedDraw, draw_stratified};
