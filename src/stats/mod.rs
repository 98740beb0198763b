//! Exact binomial statistics shared by the stages that certify quality:
//! one-sided binomial tests and Clopper–Pearson bounds.

mod binomial;

pub use binomial::{
    P_VALUE_SLACK, binomial_cdf, certifies, clopper_pearson_lower, max_certifiable_failures,
    min_rows_to_certify,
};
