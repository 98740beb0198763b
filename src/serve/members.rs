//! A request body's top-level members exactly as the client sent them,
//! each value's own text, so that what serve forwards is the client's body
//! with only what it must change changed: an integer beyond 64 bits (a
//! `seed`), `1e2` or `1.0` reach the route as written, never re-printed
//! from a float.

use std::collections::HashMap;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The members of a JSON object in the order first sent; a key sent twice
/// keeps its last value, as the parsed request does.
#[derive(Debug, Default)]
pub(super) struct Members(Vec<(String, Box<RawValue>)>);

impl Members {
    /// The members of `map`, as serde_json writes them.
    pub(super) fn of_map(map: &serde_json::Map<String, serde_json::Value>) -> Members {
        Members(
            map.iter()
                .map(|(key, value)| {
                    let raw = serde_json::value::to_raw_value(value).expect("a value serialises");
                    (key.clone(), raw)
                })
                .collect(),
        )
    }

    /// Each member, in the order sent.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.0.iter().map(|(key, value)| (key.as_str(), &**value))
    }

    /// The value of `key`, as sent.
    pub(super) fn get(&self, key: &str) -> Option<&RawValue> {
        self.iter()
            .find_map(|(their_key, value)| (their_key == key).then_some(value))
    }
}

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Members, D::Error> {
        struct Object;

        impl<'de> Visitor<'de> for Object {
            type Value = Members;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members: Vec<(String, Box<RawValue>)> = Vec::new();
                // Where each key is, so that a body of many keys costs one
                // pass, however a client repeats them.
                let mut at: HashMap<String, usize> = HashMap::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    match at.get(&key) {
                        Some(&index) => members[index].1 = value,
                        None => {
                            at.insert(key.clone(), members.len());
                            members.push((key, value));
                        }
                    }
                }
                Ok(Members(members))
            }
        }

        deserializer.deserialize_map(Object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_keeps_the_text_it_was_sent_in_and_a_repeated_key_its_last() {
        let sent = r#"{"model": "m", "seed": 18446744073709551616000, "t": 1e2, "u": 1.0,
                       "nested": {"n": 123456789012345678901234567890}, "model": "n"}"#;
        let members: Members = serde_json::from_str(sent).unwrap();
        let texts: Vec<(&str, &str)> = members
            .iter()
            .map(|(key, value)| (key, value.get()))
            .collect();
        assert_eq!(
            texts,
            [
                ("model", r#""n""#),
                ("seed", "18446744073709551616000"),
                ("t", "1e2"),
                ("u", "1.0"),
                ("nested", r#"{"n": 123456789012345678901234567890}"#),
            ]
        );
        assert_eq!(members.get("t").unwrap().get(), "1e2");
        assert!(serde_json::from_str::<Members>("[1]").is_err());
    }
}
