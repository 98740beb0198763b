//! The demo's inputs, carried in the binary so `routeval demo` runs from
//! any directory: the dataset, run config, fault profile and route tables
//! of `datasets/demo/`, and the rubrics and prompt templates of `rubrics/`.
//! Without `--data` and `--rubrics` the demo writes them under its `--out`
//! (`inputs/`), so what it ran is there to read, and runs on those.

use std::path::{Path, PathBuf};

use anyhow::Context;

macro_rules! embedded {
    ($path:literal) => {
        (
            $path,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $path)),
        )
    };
}

/// Each input by its path in the repository, and its text.
const INPUTS: [(&str, &str); 19] = [
    embedded!("datasets/demo/faults.toml"),
    embedded!("datasets/demo/prompts.jsonl"),
    embedded!("datasets/demo/routeval.toml"),
    embedded!("datasets/demo/routes/cascade.toml"),
    embedded!("datasets/demo/routes/large-only.toml"),
    embedded!("datasets/demo/routes/predictive-three-tier.toml"),
    embedded!("datasets/demo/routes/predictive.toml"),
    embedded!("rubrics/exact.toml"),
    embedded!("rubrics/gsm8k.toml"),
    embedded!("rubrics/mmlu.toml"),
    embedded!("rubrics/pairwise.toml"),
    embedded!("rubrics/support-days.toml"),
    embedded!("rubrics/support-order-json.toml"),
    embedded!("rubrics/support-reset-judged.toml"),
    embedded!("rubrics/support-reset-link.toml"),
    embedded!("rubrics/support-triage.toml"),
    embedded!("rubrics/prompts/judge.toml"),
    embedded!("rubrics/prompts/pairwise.toml"),
    embedded!("rubrics/prompts/verifier.toml"),
];

/// Where the demo's inputs go under `--out`.
pub const INPUTS_DIR: &str = "inputs";

/// Writes every input under `directory` (`directory/datasets/demo/...`,
/// `directory/rubrics/...`); the dataset and the rubrics directories.
pub fn write_inputs(directory: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    for (path, text) in INPUTS {
        let destination = directory.join(path);
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("{}: cannot create", parent.display()))?;
        }
        crate::atomic::write_bytes_atomically(&destination, text.as_bytes())
            .with_context(|| format!("{}: cannot write the demo's input", destination.display()))?;
    }
    Ok((directory.join("datasets/demo"), directory.join("rubrics")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary carries the repository's files as they are, and all of
    /// them: the demo run from anywhere is the demo run from the root.
    #[test]
    fn the_embedded_inputs_are_the_repositorys() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (path, text) in INPUTS {
            assert_eq!(
                std::fs::read_to_string(root.join(path)).unwrap(),
                text,
                "{path}"
            );
        }
        let mut on_disk = Vec::new();
        for directory in [
            "datasets/demo",
            "datasets/demo/routes",
            "rubrics",
            "rubrics/prompts",
        ] {
            for entry in std::fs::read_dir(root.join(directory)).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_file() && name != "generate.py" {
                    on_disk.push(format!("{directory}/{name}"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = INPUTS.iter().map(|(path, _)| (*path).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }
}
