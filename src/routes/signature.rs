//! Signing keys: generating a minisign key pair (the secret key file is
//! created with mode 0600 and its contents are never printed), loading them,
//! signing and verifying bytes.

use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use minisign::{KeyPair, PublicKey, PublicKeyBox, SecretKey, SecretKeyBox, SignatureBox};

/// Writes a new unencrypted key pair: the secret key to `secret` (which must
/// not exist) and the public key beside it with `.pub`. Returns the public
/// key's path.
pub fn generate(secret: &Path) -> anyhow::Result<PathBuf> {
    let public = public_key_path(secret);
    for path in [secret, public.as_path()] {
        if std::fs::symlink_metadata(path).is_ok() {
            bail!(
                "{}: already exists; refusing to overwrite a key",
                path.display()
            );
        }
    }
    // Never among a run's files, and never through a link or onto a device.
    crate::atomic::check_outputs(
        &[
            crate::atomic::Output::new(secret, "--out", &KEY_OUTPUT),
            crate::atomic::Output::new(&public, "--out", &KEY_OUTPUT),
        ],
        &[],
    )?;
    let KeyPair { pk, sk } =
        KeyPair::generate_unencrypted_keypair().context("cannot generate a key pair")?;
    let secret_box = sk
        .to_box(Some("routeval secret key"))
        .context("cannot encode the secret key")?;
    let public_box = pk.to_box().context("cannot encode the public key")?;
    // Both staged whole before either lands, neither over any file: a full
    // disk leaves no key, never an empty one that blocks the next try.
    let secret_staged = crate::atomic::Staged::new_secret(secret, |file| {
        Ok(file.write_all(secret_box.to_string().as_bytes())?)
    })
    .with_context(|| format!("{}: cannot write the secret key", secret.display()))?;
    let public_staged = crate::atomic::Staged::new(&public, |file| {
        Ok(file.write_all(public_box.to_string().as_bytes())?)
    })
    .with_context(|| format!("{}: cannot write the public key", public.display()))?;
    secret_staged
        .commit_new()
        .with_context(|| format!("{}: cannot write the secret key", secret.display()))?;
    if let Err(error) = public_staged.commit_new() {
        // The secret key just made is of no use without its public half.
        let _ = std::fs::remove_file(secret);
        return Err(error)
            .with_context(|| format!("{}: cannot write the public key", public.display()));
    }
    Ok(public)
}

/// A key, secret or public: always a new file.
const KEY_OUTPUT: crate::atomic::OutputKind =
    crate::atomic::OutputKind::new("a key", crate::atomic::Replaces::Nothing);

pub fn public_key_path(secret: &Path) -> PathBuf {
    let mut name = secret.as_os_str().to_owned();
    name.push(".pub");
    name.into()
}

pub fn load_secret(path: &Path) -> anyhow::Result<SecretKey> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the secret key (--key)", path.display()))?;
    let secret_box = SecretKeyBox::from_string(&text)
        .map_err(|_| anyhow::anyhow!("{}: not a minisign secret key (--key)", path.display()))?;
    let key = secret_box.into_unencrypted_secret_key().map_err(|error| {
        anyhow::anyhow!(
            "{}: not an unencrypted minisign secret key (--key): {error}",
            path.display()
        )
    })?;
    Ok(key)
}

/// A public key from a `.pub` file, or given inline as minisign's base64.
pub fn load_public(key: &str) -> anyhow::Result<PublicKey> {
    let path = Path::new(key);
    if path.exists() {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{key}: cannot read the public key"))?;
        let public_box = PublicKeyBox::from_string(&text)
            .map_err(|_| anyhow::anyhow!("{key}: not a minisign public key"))?;
        return public_box
            .into_public_key()
            .map_err(|_| anyhow::anyhow!("{key}: not a minisign public key"));
    }
    PublicKey::from_base64(key.trim())
        .map_err(|_| anyhow::anyhow!("--pubkey: neither a public key file nor a base64 key"))
}

/// A prehashed signature of `bytes` carrying `trusted_comment`.
pub fn sign(secret: &SecretKey, bytes: &[u8], trusted_comment: &str) -> anyhow::Result<String> {
    let public = PublicKey::from_secret_key(secret).context("cannot derive the public key")?;
    let signature = minisign::sign(
        Some(&public),
        secret,
        Cursor::new(bytes),
        Some(trusted_comment),
        Some("signature from routeval"),
    )
    .context("cannot sign")?;
    Ok(signature.to_string())
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature file is malformed or not in minisign's exact encoding")]
    Malformed,
    #[error("legacy (non-prehashed) signatures are refused")]
    Legacy,
    #[error("the signature does not verify with this public key: {0}")]
    Invalid(String),
}

/// Verifies `signature` over `bytes`; returns its trusted comment.
pub fn verify(public: &PublicKey, bytes: &[u8], signature: &str) -> Result<String, SignatureError> {
    let text = signature;
    let signature = SignatureBox::from_string(text).map_err(|_| SignatureError::Malformed)?;
    // The parser trims white space and accepts non-canonical base64; only
    // the exact encoding is accepted, so no byte of a signature is slack.
    if signature.to_string() != text {
        return Err(SignatureError::Malformed);
    }
    if !signature.is_prehashed() {
        return Err(SignatureError::Legacy);
    }
    minisign::verify(public, &signature, Cursor::new(bytes), true, false, false)
        .map_err(|error| SignatureError::Invalid(error.to_string().to_lowercase()))?;
    signature
        .trusted_comment()
        .map_err(|_| SignatureError::Malformed)
}
