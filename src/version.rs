//! Versioned documents refuse versions this build does not know: a reader
//! that guessed at a newer format could pass a check it does not understand.

use serde::{Deserialize, Deserializer};

/// Deserializes a `schema_version` and refuses any outside `OLDEST..=NEWEST`.
pub fn known<'de, D: Deserializer<'de>, const OLDEST: u32, const NEWEST: u32>(
    deserializer: D,
) -> Result<u32, D::Error> {
    let version = u32::deserialize(deserializer)?;
    if (OLDEST..=NEWEST).contains(&version) {
        Ok(version)
    } else {
        Err(serde::de::Error::custom(unknown(
            &version.to_string(),
            &if OLDEST == NEWEST {
                NEWEST.to_string()
            } else {
                format!("{OLDEST} to {NEWEST}")
            },
        )))
    }
}

/// The message for a version this build does not read.
pub fn unknown(found: &str, supported: &str) -> String {
    format!(
        "schema_version {found} is not one this routeval reads ({supported}); use the routeval that wrote it"
    )
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct Document {
        #[serde(deserialize_with = "super::known::<_, 1, 2>")]
        schema_version: u32,
    }

    #[test]
    fn only_known_versions_read() {
        for version in [1, 2] {
            let text = format!("{{\"schema_version\": {version}}}");
            let document: Document = serde_json::from_str(&text).unwrap();
            assert_eq!(document.schema_version, version);
        }
        for version in [0, 3, 99] {
            let text = format!("{{\"schema_version\": {version}}}");
            let error = serde_json::from_str::<Document>(&text).unwrap_err();
            assert!(
                error.to_string().starts_with(&format!(
                    "schema_version {version} is not one this routeval reads (1 to 2)"
                )),
                "{error}"
            );
        }
    }
}
