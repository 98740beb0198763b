//! Why a calibration stops: each error names the file, the slice or the
//! flag.

use std::path::PathBuf;

use crate::schema::{InputError, ReadError};

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Read(#[from] ReadError),

    #[error(transparent)]
    Input(#[from] InputError),

    #[error(
        "{}: the results carry audited_ok_* columns and --audits {} gives verdicts too; keep the audits in one place",
        results.display(),
        audits.display()
    )]
    AuditedTwice { results: PathBuf, audits: PathBuf },

    #[error(
        "{}: slice \"{slice}\" of the results has no audited rows; the draw takes rows from every slice, so the audit set is incomplete",
        audits.display()
    )]
    UnauditedSlice { audits: PathBuf, slice: String },

    #[error(
        "{}: slice \"{slice}\" has no calibration rows once --holdout {fraction} is set aside; lower --holdout or merge the slice",
        path.display()
    )]
    NothingToCalibrate {
        path: PathBuf,
        slice: String,
        fraction: f64,
    },

    #[error("--grid must be at least 2, got {0}")]
    Grid(usize),

    #[error("--audits correct two-tier calibrations only; calibrate {0} tiers without it")]
    AuditsOverTiers(usize),

    #[error(
        "--order-from orders the candidates of more than two tiers; two tiers are tested in their own order, from escalate-all towards escalate-none"
    )]
    OrderFromTwoTiers,

    #[error("{}: {problem} (--order-from)", path.display())]
    OrderFrom { path: PathBuf, problem: String },
}
