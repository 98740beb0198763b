//! The clients serve accepts: a TOML file of API-key hashes, each naming
//! the tenant it authenticates and, optionally, the one slice its requests
//! belong to. The file holds only sha256 digests, so neither it nor any log,
//! record or error ever holds a key.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::digest::sha256_hex;

/// Who a key authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub tenant: String,
    /// The slice every request of this key is; `None`: the tenant's name,
    /// or a slice the request claims where claims are trusted.
    pub slice: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    keys: Vec<KeyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    /// Lowercase hex sha256 of the key.
    sha256: String,
    tenant: String,
    #[serde(default)]
    slice: Option<String>,
}

/// The accepted keys, by digest.
#[derive(Debug, Default)]
pub struct Keys {
    by_digest: HashMap<String, Identity>,
}

impl Keys {
    pub fn load(path: &Path) -> anyhow::Result<Keys> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            anyhow::anyhow!("{}: cannot read (--keys): {error}", path.display())
        })?;
        let file: KeysFile = toml::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                crate::toml_message::one_line(&error.to_string())
            )
        })?;
        let mut by_digest = HashMap::new();
        for (index, entry) in file.keys.into_iter().enumerate() {
            let at = format!("{}: keys[{index}]", path.display());
            let digest = entry.sha256.trim().to_ascii_lowercase();
            if digest.len() != 64 || !digest.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                anyhow::bail!(
                    "{at}: sha256 is not 64 hex digits (the file holds sha256 of each key, never a key: `printf %s \"$KEY\" | sha256sum`)"
                );
            }
            if entry.tenant.trim().is_empty() {
                anyhow::bail!("{at}: tenant is empty");
            }
            if entry
                .slice
                .as_deref()
                .is_some_and(|slice| slice.trim().is_empty())
            {
                anyhow::bail!("{at}: slice is empty (leave it out for the tenant's own slice)");
            }
            let identity = Identity {
                tenant: entry.tenant,
                slice: entry.slice,
            };
            if by_digest.insert(digest, identity).is_some() {
                anyhow::bail!("{at}: the same key hash is listed twice");
            }
        }
        if by_digest.is_empty() {
            anyhow::bail!(
                "{}: no keys; serve accepts no client without one",
                path.display()
            );
        }
        Ok(Keys { by_digest })
    }

    /// How many keys are accepted.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// Never true of loaded keys: a file without one is refused.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The identity of the bearer key in an `Authorization` header value;
    /// the scheme's name is case-insensitive (RFC 7235).
    pub fn authenticate(&self, authorization: Option<&str>) -> Option<&Identity> {
        let (scheme, key) = authorization?.trim_start().split_once([' ', '\t'])?;
        let key = key.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || key.is_empty() {
            return None;
        }
        self.by_digest.get(&sha256_hex(key.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_known_by_their_digest_only() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("keys.toml");
        let digest = sha256_hex(b"sk-eu-1");
        std::fs::write(
            &path,
            format!("[[keys]]\nsha256 = \"{digest}\"\ntenant = \"eu\"\nslice = \"billing\"\n"),
        )
        .unwrap();
        let keys = Keys::load(&path).unwrap();
        let found = keys.authenticate(Some("Bearer sk-eu-1")).unwrap();
        assert_eq!(found.tenant, "eu");
        assert_eq!(found.slice.as_deref(), Some("billing"));
        assert!(keys.authenticate(Some("Bearer sk-eu-2")).is_none());
        assert!(keys.authenticate(Some("sk-eu-1")).is_none());
        for scheme in ["bearer", "BEARER", "BeArEr"] {
            let header = format!("{scheme} sk-eu-1");
            assert_eq!(
                keys.authenticate(Some(&header)).map(|found| &found.tenant),
                Some(&"eu".to_owned()),
                "{header}"
            );
        }
        assert!(keys.authenticate(Some("Basic sk-eu-1")).is_none());
        assert!(keys.authenticate(Some("Bearersk-eu-1")).is_none());
        assert!(keys.authenticate(None).is_none());
        std::fs::write(&path, "[[keys]]\nsha256 = \"sk-eu-1\"\ntenant = \"eu\"\n").unwrap();
        let error = Keys::load(&path).unwrap_err().to_string();
        assert!(
            error.contains("keys[0]: sha256 is not 64 hex digits"),
            "{error}"
        );
        assert!(
            !error.contains("sk-eu-1"),
            "a key never appears in an error: {error}"
        );
    }
}
