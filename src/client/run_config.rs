//! `routeval.toml`: the endpoints of the tiers (two, `small` and `large`,
//! or any number named cheapest first by `[run] tiers`) and the verifier,
//! their prices, limits and deadlines, and the generation parameters of a
//! run. Strict: an unknown key is an error that names it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

use super::config::{EndpointConfig, GenerationConfig};
use crate::schema::{CallTier, floating_alias};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    tiers: BTreeMap<String, EndpointConfig>,
    #[serde(default)]
    verifier: Option<EndpointConfig>,
    /// A verifier of its own for the stage of tier NAME (`[verifiers.NAME]`).
    #[serde(default)]
    verifiers: BTreeMap<String, EndpointConfig>,
    /// The endpoint of `llm_judge` rubrics.
    #[serde(default)]
    judge: Option<EndpointConfig>,
    #[serde(default)]
    run: GenerationConfig,
}

/// One answering tier of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct TierEndpoint {
    pub tier: CallTier,
    pub endpoint: EndpointConfig,
}

impl TierEndpoint {
    /// `[tiers.NAME]`, for messages.
    pub fn section(&self) -> String {
        format!("[tiers.{}]", self.tier)
    }
}

/// A checked `routeval.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    pub path: PathBuf,
    /// At least two, cheapest first.
    pub tiers: Vec<TierEndpoint>,
    /// Checks the answer of every tier but the last (a cascade's stages).
    pub verifier: Option<EndpointConfig>,
    /// `[verifiers.NAME]`: the stage of tier NAME checked by its own
    /// verifier instead of `[verifier]`.
    pub stage_verifiers: BTreeMap<String, EndpointConfig>,
    pub judge: Option<EndpointConfig>,
    pub run: GenerationConfig,
    /// The file's bytes, for the manifest's digest.
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl RunConfig {
    /// The SHA-256 of the file, as the manifest records it.
    pub fn sha256(&self) -> String {
        crate::digest::sha256_hex(&self.bytes)
    }

    /// The cheapest tier.
    /// The most calls any one endpoint (a tier or a verifier) takes at
    /// once: what the shared HTTP pool and the prompts in flight are sized
    /// for.
    pub fn widest_concurrency(&self) -> usize {
        self.tiers
            .iter()
            .map(|tier| tier.endpoint.max_concurrency)
            .chain(
                self.verifier
                    .iter()
                    .chain(self.stage_verifiers.values())
                    .map(|verifier| verifier.max_concurrency),
            )
            .max()
            .unwrap_or(1)
    }

    pub fn small(&self) -> &EndpointConfig {
        &self.tiers[0].endpoint
    }

    /// The strongest tier.
    pub fn large(&self) -> &EndpointConfig {
        &self.tiers[self.tiers.len() - 1].endpoint
    }

    /// The verifier of the stage of tier `name`: its own, else `[verifier]`.
    pub fn verifier_for(&self, name: &str) -> Option<&EndpointConfig> {
        self.stage_verifiers.get(name).or(self.verifier.as_ref())
    }

    /// The answering tiers' names, cheapest first.
    pub fn tier_names(&self) -> Vec<String> {
        self.tiers
            .iter()
            .map(|tier| tier.tier.name().to_owned())
            .collect()
    }

    pub fn load(path: &Path) -> Result<RunConfig, ConfigError> {
        let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let text = std::str::from_utf8(&bytes).map_err(|error| invalid(error.to_string()))?;
        let mut file: ConfigFile = toml::from_str(text)
            .map_err(|error| invalid(crate::toml_message::one_line(&error.to_string())))?;
        let order = match file.run.tiers.take() {
            Some(order) => order,
            None => {
                for name in file.tiers.keys() {
                    if name != "small" && name != "large" {
                        return Err(invalid(format!(
                            "[tiers.{name}]: a tier other than small and large needs [run] tiers = [...], every tier named cheapest first"
                        )));
                    }
                }
                vec!["small".to_owned(), "large".to_owned()]
            }
        };
        crate::schema::Tiers::parse(&order.join(","))
            .map_err(|problem| invalid(format!("[run] tiers: {problem}")))?;
        let mut tiers = Vec::with_capacity(order.len());
        for name in &order {
            if name.starts_with("verifier") {
                return Err(invalid(format!(
                    "[run] tiers: {name:?} is a verifier's name; name the tier otherwise"
                )));
            }
            let endpoint = file.tiers.remove(name).ok_or_else(|| {
                invalid(format!("[tiers.{name}] is missing ([run] tiers names it)"))
            })?;
            let tier = CallTier::parse(name).expect("checked by Tiers::parse");
            tiers.push(TierEndpoint { tier, endpoint });
        }
        if let Some(name) = file.tiers.keys().next() {
            return Err(invalid(format!(
                "[tiers.{name}]: not in [run] tiers; name every tier there, cheapest first"
            )));
        }
        let config = RunConfig {
            path: path.to_owned(),
            tiers,
            verifier: file.verifier,
            stage_verifiers: file.verifiers,
            judge: file.judge,
            run: file.run,
            bytes,
        };
        config.check().map_err(invalid)?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        let tiers = self
            .tiers
            .iter()
            .map(|tier| (tier.section(), Some(&tier.endpoint)));
        let others = [
            ("[verifier]".to_owned(), self.verifier.as_ref()),
            ("[judge]".to_owned(), self.judge.as_ref()),
        ];
        let stages = self
            .stage_verifiers
            .iter()
            .map(|(name, endpoint)| (format!("[verifiers.{name}]"), Some(endpoint)));
        for (section, endpoint) in tiers.chain(others).chain(stages) {
            let Some(endpoint) = endpoint else { continue };
            check_endpoint(endpoint).map_err(|problem| format!("{section}: {problem}"))?;
        }
        if let Some(verifier) = &self.verifier
            && verifier.template.is_none()
        {
            return Err("[verifier]: template is missing (a file in rubrics/prompts/)".to_owned());
        }
        let stages: Vec<String> = self.tier_names()[..self.tiers.len() - 1].to_vec();
        for (name, verifier) in &self.stage_verifiers {
            if !stages.contains(name) {
                return Err(format!(
                    "[verifiers.{name}]: not a tier whose answers are verified (those are {}: every tier but the last)",
                    stages.join(", ")
                ));
            }
            if verifier.template.is_none() {
                return Err(format!(
                    "[verifiers.{name}]: template is missing (a file in rubrics/prompts/)"
                ));
            }
        }
        if self.verifier.is_none()
            && !self.stage_verifiers.is_empty()
            && let Some(stage) = stages
                .iter()
                .find(|stage| !self.stage_verifiers.contains_key(*stage))
        {
            return Err(format!(
                "the stage of tier {stage:?} has no verifier: give [verifier] for every stage or [verifiers.{stage}]"
            ));
        }
        let run = &self.run;
        if run.samples == 0 || run.samples > 64 {
            return Err(format!(
                "[run]: samples must be 1 to 64, got {}",
                run.samples
            ));
        }
        if !(0.0..=2.0).contains(&run.temperature) {
            return Err(format!(
                "[run]: temperature must be in [0, 2], got {}",
                run.temperature
            ));
        }
        if run.max_tokens == 0 {
            return Err("[run]: max_tokens must be positive".to_owned());
        }
        if !(run.retry_budget.is_finite() && run.retry_budget >= 0.0) {
            return Err(format!(
                "[run]: retry_budget must be a non-negative share, got {}",
                run.retry_budget
            ));
        }
        Ok(())
    }
}

fn check_endpoint(endpoint: &EndpointConfig) -> Result<(), String> {
    if !(endpoint.base_url.starts_with("http://") || endpoint.base_url.starts_with("https://")) {
        return Err(format!(
            "base_url must start with http:// or https://, got {:?}",
            super::redact_url(&endpoint.base_url)
        ));
    }
    if let Some(alias) = floating_alias(&endpoint.model) {
        return Err(format!(
            "model {:?} has {alias}; pin a version",
            endpoint.model
        ));
    }
    if let Some(variable) = &endpoint.api_key_env
        && (variable.is_empty()
            || !variable
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!(
            "api_key_env must name an environment variable, got {variable:?}"
        ));
    }
    let prices = [
        ("price_input_per_mtok", endpoint.price_input_per_mtok),
        ("price_output_per_mtok", endpoint.price_output_per_mtok),
        (
            "price_cached_input_per_mtok",
            endpoint.price_cached_input_per_mtok.unwrap_or(0.0),
        ),
    ];
    for (field, price) in prices {
        if !(price.is_finite() && price >= 0.0) {
            return Err(format!(
                "{field} must be a non-negative number, got {price}"
            ));
        }
    }
    if endpoint.max_concurrency == 0 {
        return Err("max_concurrency must be positive".to_owned());
    }
    if endpoint.rpm == Some(0) || endpoint.tpm == Some(0) {
        return Err("rpm and tpm must be positive (leave them out for no limit)".to_owned());
    }
    let deadlines = [
        ("first_token_s", endpoint.first_token_s),
        ("stall_s", endpoint.stall_s),
        ("total_s", endpoint.total_s),
    ];
    for (field, seconds) in deadlines {
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(format!(
                "{field} must be a positive number of seconds, got {seconds}"
            ));
        }
    }
    Ok(())
}

/// The key of an endpoint, from the variable its config names, which must
/// be set when it is named.
pub fn api_key(
    config: &RunConfig,
    section: &str,
    endpoint: &EndpointConfig,
) -> anyhow::Result<Option<String>> {
    let Some(variable) = &endpoint.api_key_env else {
        return Ok(None);
    };
    match std::env::var(variable) {
        Ok(value) if !value.trim().is_empty() => Ok(Some(value)),
        _ => bail!(
            "{}: {section}: the environment variable {variable} (api_key_env) is not set",
            config.path.display()
        ),
    }
}

/// Writes a copy of the run config at `source` whose endpoints (every
/// tier's, the verifier's and the judge's) are all `base_url`: the config
/// of a run against one server, as the demo's against serve-sim.
pub fn point_run_config_at(
    source: &Path,
    base_url: &str,
    destination: &Path,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(source)
        .with_context(|| format!("{}: cannot read", source.display()))?;
    let mut config: toml::Table = toml::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "{}: {}",
            source.display(),
            crate::toml_message::one_line(&error.to_string())
        )
    })?;
    let mut endpoints: Vec<&mut toml::Table> = Vec::new();
    for (name, section) in &mut config {
        match (name.as_str(), section) {
            ("tiers", toml::Value::Table(tiers)) => {
                endpoints.extend(tiers.iter_mut().filter_map(|(_, tier)| tier.as_table_mut()));
            }
            ("verifier" | "judge", toml::Value::Table(endpoint)) => endpoints.push(endpoint),
            _ => {}
        }
    }
    for endpoint in endpoints {
        endpoint.insert(
            "base_url".to_owned(),
            toml::Value::String(base_url.to_owned()),
        );
    }
    crate::atomic::write_bytes_atomically(destination, toml::to_string(&config)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[tiers.small]
base_url = "http://127.0.0.1:1/v1"
model = "sim-small-2026-11-01"
price_input_per_mtok = 0.15
price_output_per_mtok = 0.6

[tiers.large]
base_url = "http://127.0.0.1:1/v1"
model = "sim-large-2026-11-01"
api_key_env = "LARGE_KEY"
price_input_per_mtok = 3
price_output_per_mtok = 15
rpm = 600
"#;

    fn load(text: &str) -> Result<RunConfig, String> {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("routeval.toml");
        std::fs::write(&path, text).unwrap();
        RunConfig::load(&path).map_err(|error| {
            error
                .to_string()
                .replace(&directory.path().display().to_string(), "")
        })
    }

    #[test]
    fn a_good_config_loads_with_defaults() {
        let config = load(GOOD).unwrap();
        assert_eq!(config.large().rpm, Some(600));
        assert_eq!(config.small().max_concurrency, 32);
        assert_eq!(config.run.samples, 1);
        assert!((config.large().cost(1_000_000, 0, 100_000) - 4.5).abs() < 1e-12);
        assert_eq!(config.tier_names(), ["small", "large"]);
    }

    #[test]
    fn run_tiers_order_any_number_of_tiers() {
        let mid = GOOD.replace("[tiers.large]", "[tiers.mid]");
        let three = format!(
            "{mid}\n{}\n[run]\ntiers = [\"small\", \"mid\", \"large\"]\n",
            &GOOD[GOOD.find("[tiers.large]").unwrap()..]
        );
        let config = load(&three).unwrap();
        assert_eq!(config.tier_names(), ["small", "mid", "large"]);
        assert_eq!(config.large().rpm, Some(600));
    }

    #[test]
    fn bad_configs_name_the_problem() {
        let cases = [
            (
                format!("{GOOD}\n[run]\ntemprature = 0.5\n"),
                "unknown field `temprature`",
            ),
            (
                GOOD.replace("sim-small-2026-11-01", "gpt-4o-latest"),
                "[tiers.small]: model \"gpt-4o-latest\" has the floating alias \"latest\"",
            ),
            (
                GOOD.replace("[tiers.large]", "[tiers.medium]"),
                "[tiers.medium]: a tier other than small and large needs [run] tiers",
            ),
            (
                format!("{GOOD}\n[run]\ntiers = [\"small\", \"mid\", \"large\"]\n"),
                "[tiers.mid] is missing ([run] tiers names it)",
            ),
            (
                format!("{GOOD}\n[run]\ntiers = [\"small\"]\n"),
                "[run] tiers: ",
            ),
            (
                format!("{GOOD}\n[run]\ntiers = [\"large\", \"small\"]\n"),
                "[run] tiers: tier \"large\" can only be the last",
            ),
            (
                GOOD.replace("LARGE_KEY", "my key"),
                "api_key_env must name an environment variable",
            ),
            (
                GOOD.replace("rpm = 600", "rpm = 0"),
                "rpm and tpm must be positive",
            ),
            (
                GOOD.replace(
                    "http://127.0.0.1:1/v1\"\nmodel = \"sim-large",
                    "ftp://x\"\nmodel = \"sim-large",
                ),
                "[tiers.large]: base_url must start with http://",
            ),
            (
                format!(
                    "{GOOD}\n[verifier]\nbase_url = \"http://x/v1\"\nmodel = \"v-1\"\nprice_input_per_mtok = 0\nprice_output_per_mtok = 0\n"
                ),
                "[verifier]: template is missing",
            ),
        ];
        for (text, expected) in cases {
            let message = load(&text).unwrap_err();
            assert!(message.contains(expected), "{message}");
            assert!(!message.contains('\n'), "{message}");
        }
    }
}
