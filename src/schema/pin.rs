//! A route must pin a model version: a floating alias lets the provider
//! change behaviour under an evaluated route.

/// Names that float: a provider may point them at a new model at any time.
const FLOATING: [&str; 6] = [
    "latest", "stable", "current", "default", "newest", "preview",
];

/// The floating part of `model`, if any: `gpt-4o-latest`, `llama3:latest`,
/// `claude-3-5-sonnet-latest`, or an empty name.
pub fn floating_alias(model: &str) -> Option<String> {
    if model.trim().is_empty() {
        return Some("an empty model name".to_owned());
    }
    model
        .split(['-', ':', '/', '@', '.', '_'])
        .find(|part| FLOATING.contains(&part.to_ascii_lowercase().as_str()))
        .map(|part| format!("the floating alias \"{part}\""))
}

#[cfg(test)]
mod tests {
    use super::floating_alias;

    #[test]
    fn pinned_versions_pass_and_aliases_do_not() {
        for pinned in [
            "gpt-4o-mini-2024-07-18",
            "claude-3-5-sonnet-20241022",
            "mistralai/Mixtral-8x7B-Instruct-v0.1",
            "llama3.1:8b-instruct-q4_K_M",
        ] {
            assert_eq!(floating_alias(pinned), None, "{pinned}");
        }
        for floating in [
            "latest",
            "gpt-4o-latest",
            "llama3:latest",
            "claude-3-5-sonnet-latest",
            "gemini-pro@stable",
            " ",
        ] {
            assert!(floating_alias(floating).is_some(), "{floating}");
        }
    }
}
