//! `routeval verify`: a route config is deployable only if its signature
//! verifies, its trusted comment matches the file, it follows the config it
//! replaces, and it has not expired. Each failure has its own message.

use std::path::Path;

use anyhow::Context;
use minisign::PublicKey;

use crate::clock::{Clock, format_rfc3339, parse_rfc3339};

use super::config::{RouteConfig, signature_path};
use super::signature::{SignatureError, verify as verify_signature};
use crate::digest::sha256_hex;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("the trusted comment is not routeval's: {0:?}")]
    ForeignComment(String),
    #[error("the trusted comment says {field} {signed}, the config says {actual}")]
    CommentMismatch {
        field: &'static str,
        signed: String,
        actual: String,
    },
    #[error("the config is not a routeval route config: {0}")]
    NotAConfig(String),
    #[error("version {version} does not increase over the previous config's {previous}")]
    VersionNotIncreasing { version: u64, previous: u64 },
    #[error("parent_sha256 {found} is not the previous config's sha256 {expected}")]
    ParentMismatch { expected: String, found: String },
    #[error("the config expired at {expires_at} (now {now})")]
    Expired { expires_at: String, now: String },
    #[error("--previous: {0}")]
    Previous(Box<VerifyError>),
}

/// A config that passed every check.
#[derive(Debug)]
pub struct Verified {
    pub config: RouteConfig,
    pub sha256: String,
}

/// A config's bytes and its signature, read from beside it; an unreadable
/// file is an input error naming it (`flag` says which input it was).
pub fn read_signed(config_path: &Path, flag: &str) -> anyhow::Result<(Vec<u8>, String)> {
    let bytes = std::fs::read(config_path)
        .with_context(|| format!("{}: cannot read{flag}", config_path.display()))?;
    let signature_file = signature_path(config_path);
    let signature = std::fs::read_to_string(&signature_file).with_context(|| {
        format!(
            "{}: cannot read the signature{flag}",
            signature_file.display()
        )
    })?;
    Ok((bytes, signature))
}

/// Reads the config and its signature; an unreadable file is an input error
/// (`Err`), a failed check is `Ok(Err(..))`.
pub fn verify_config(
    config_path: &Path,
    public: &PublicKey,
    previous: Option<&Path>,
    clock: &dyn Clock,
) -> anyhow::Result<Result<Verified, VerifyError>> {
    let (bytes, signature) = read_signed(config_path, "")?;
    let previous = previous
        .map(|path| read_signed(path, " (--previous)"))
        .transpose()?;
    Ok(check(
        &bytes,
        &signature,
        public,
        previous
            .as_ref()
            .map(|(bytes, signature)| (bytes.as_slice(), signature.as_str())),
        clock,
    ))
}

/// The checks that make a config routeval's and signed by `public`, whatever
/// its age: the signature, the trusted comment, the document.
pub fn check_signed(
    bytes: &[u8],
    signature: &str,
    public: &PublicKey,
) -> Result<Verified, VerifyError> {
    let comment = verify_signature(public, bytes, signature)?;
    let config: RouteConfig = serde_json::from_slice(bytes)
        .map_err(|error| VerifyError::NotAConfig(error.to_string()))?;
    let sha256 = sha256_hex(bytes);
    let fields =
        parse_comment(&comment).ok_or_else(|| VerifyError::ForeignComment(comment.clone()))?;
    let actual = [
        ("config_id", config.config_id.clone()),
        ("version", config.version.to_string()),
        ("sha256", sha256.clone()),
        (
            "parent",
            config
                .parent_sha256
                .clone()
                .unwrap_or_else(|| "none".to_owned()),
        ),
    ];
    for ((field, signed), (_, actual)) in fields.into_iter().zip(actual) {
        if signed != actual {
            return Err(VerifyError::CommentMismatch {
                field,
                signed,
                actual,
            });
        }
    }
    Ok(Verified { config, sha256 })
}

/// Every check, on bytes: signed, chained to `previous` (its bytes and
/// signature, which must verify with the same key), and not expired.
pub fn check(
    bytes: &[u8],
    signature: &str,
    public: &PublicKey,
    previous: Option<(&[u8], &str)>,
    clock: &dyn Clock,
) -> Result<Verified, VerifyError> {
    let Verified { config, sha256 } = check_signed(bytes, signature, public)?;
    if let Some((previous, previous_signature)) = previous {
        let before = check_signed(previous, previous_signature, public)
            .map_err(|error| VerifyError::Previous(Box::new(error)))?
            .config;
        if config.version <= before.version {
            return Err(VerifyError::VersionNotIncreasing {
                version: config.version,
                previous: before.version,
            });
        }
        let expected = sha256_hex(previous);
        let found = config
            .parent_sha256
            .clone()
            .unwrap_or_else(|| "none".to_owned());
        if found != expected {
            return Err(VerifyError::ParentMismatch { expected, found });
        }
    }
    let now = clock.now();
    let expires = parse_rfc3339(&config.expires_at).ok_or_else(|| {
        VerifyError::NotAConfig(format!(
            "expires_at {:?} is not RFC 3339",
            config.expires_at
        ))
    })?;
    if now >= expires {
        return Err(VerifyError::Expired {
            expires_at: config.expires_at.clone(),
            now: format_rfc3339(now),
        });
    }
    Ok(Verified { config, sha256 })
}

/// The four fields of routeval's trusted comment, in order.
fn parse_comment(comment: &str) -> Option<[(&'static str, String); 4]> {
    let rest = comment.strip_prefix("routeval ")?;
    let mut parts = rest.split(' ');
    let mut field = |name: &'static str| -> Option<(&'static str, String)> {
        let value = parts.next()?.strip_prefix(name)?.strip_prefix(':')?;
        Some((name, value.to_owned()))
    };
    let fields = [
        field("config_id")?,
        field("version")?,
        field("sha256")?,
        field("parent")?,
    ];
    parts.next().is_none().then_some(fields)
}
