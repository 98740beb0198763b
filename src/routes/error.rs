//! Why a route table was refused.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },

    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}
