//! The flags that name a graded-results file's score and slice columns,
//! shared by the commands that read one.

use clap::Args;

/// The graded results' score and slice columns, where a file names them
/// otherwise.
#[derive(Debug, Args)]
pub struct ColumnArgs {
    /// The file's name for the score column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "score",
        env = "ROUTEVAL_SCORE_COL"
    )]
    pub score_col: String,

    /// The file's name for the slice column.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "slice",
        env = "ROUTEVAL_SLICE_COL"
    )]
    pub slice_col: String,
}

impl ColumnArgs {
    pub fn names(&self) -> crate::schema::ColumnNames {
        crate::schema::ColumnNames::new(self.score_col.clone(), self.slice_col.clone())
    }
}
