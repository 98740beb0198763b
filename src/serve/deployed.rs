//! The config being served and everything it pins, loaded and checked
//! before a request sees it: the signature, the expiry, the schema, the
//! chain from the running config on reload, the router file's sha256 and
//! format, the verifier template's sha256, and each route's endpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use minisign::PublicKey;

use crate::client::TokenPrices;
use crate::clock::{Clock, parse_rfc3339};
use crate::digest::sha256_hex;
use crate::router_model::{FEATURES_VERSION, ROUTER_FORMATS, Router};
use crate::routes::{
    PinnedVerifier, RouteConfig, Scorer, Serving, VerdictScore, VerifyError, check_config,
    check_signed, read_signed,
};
use crate::rubric::PromptTemplate;

/// Why a config cannot be served; each is one line naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Unreadable(String),
    #[error("{path}: {error}")]
    Refused { path: PathBuf, error: VerifyError },
    #[error(
        "{path}: a {schema} config has no `serving` block (serving.slice, serving.unknown_slice, serving.scorer or serving.verifier): gate it again with this routeval to sign what serving needs"
    )]
    NotServable { path: PathBuf, schema: String },
    #[error("{path}: {problem}")]
    Pin { path: PathBuf, problem: String },
    #[error("{0}")]
    ProviderKeys(#[from] super::provider_keys::ProviderKeysError),
    #[error(
        "{path}: the signed config expired at {expires_at}, more than --expired-grace-s {grace_s} ago (now {now}); deploy a newer version, or start with --expired start to serve it expired"
    )]
    PastGrace {
        path: PathBuf,
        expires_at: String,
        now: String,
        grace_s: u64,
    },
    #[error(
        "{path}: version {version} does not follow the running version {running}; a rollback is refused (the running config keeps serving)"
    )]
    Rollback {
        path: PathBuf,
        version: u64,
        running: u64,
    },
}

/// An OpenAI-compatible endpoint of one route, with its key and prices.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub chat_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub prices: TokenPrices,
}

impl Upstream {
    /// What a call cost, USD, as the run prices it.
    pub fn cost(&self, input: u64, cached_input: u64, output: u64) -> f64 {
        self.prices.cost(input, cached_input, output)
    }
}

/// A cascade's verifier, ready to ask.
#[derive(Debug, Clone)]
pub struct Verifier {
    pub route: String,
    pub template: PromptTemplate,
    pub score: VerdictScore,
    pub max_tokens: u32,
}

/// A verified config and what it pins, loaded.
#[derive(Debug)]
pub struct Deployed {
    pub config: RouteConfig,
    pub sha256: String,
    pub bytes: Vec<u8>,
    pub signature: String,
    pub serving: Serving,
    pub router: Option<Arc<Router>>,
    pub verifier: Option<Verifier>,
    pub upstreams: BTreeMap<String, Upstream>,
    /// Unix seconds.
    pub expires_at: i64,
}

/// Where the config's artifacts are and how its keys are found.
#[derive(Debug, Clone)]
pub struct Sources {
    pub config: PathBuf,
    pub router: Option<PathBuf>,
    /// The environment, for the routes' `api_key_env`.
    pub env: BTreeMap<String, String>,
    /// `--provider-keys`: where the routes' variables are read instead of
    /// the environment, again at every load (docs in
    /// [`super::provider_keys`]).
    pub provider_keys: Option<PathBuf>,
}

/// Loads the config at `sources.config`. With `running`, the new config must
/// be a higher version, as at start (versions in between may have been
/// missed).
pub fn load(
    sources: &Sources,
    public: &PublicKey,
    clock: &dyn Clock,
    running: Option<&Deployed>,
) -> Result<Deployed, LoadError> {
    load_at_start(sources, public, clock, running, None)
}

/// [`load`]; with `expired_ok`, a first config (no `running`) that has
/// expired but passes every other check is loaded (`--expired start`).
pub fn load_at_start(
    sources: &Sources,
    public: &PublicKey,
    clock: &dyn Clock,
    running: Option<&Deployed>,
    expired: Option<StartExpired>,
) -> Result<Deployed, LoadError> {
    let path = &sources.config;
    let (bytes, signature) =
        read_signed(path, "").map_err(|error| LoadError::Unreadable(format!("{error:#}")))?;
    let refused = |error| LoadError::Refused {
        path: path.clone(),
        error,
    };
    if let Some(running) = running {
        let signed = check_signed(&bytes, &signature, public).map_err(refused)?;
        if signed.config.version <= running.config.version {
            return Err(LoadError::Rollback {
                path: path.clone(),
                version: signed.config.version,
                running: running.config.version,
            });
        }
    }
    // The rule at reload is the rule at start: a higher version, checked
    // above. Its parent need not be the running file: a replica that missed
    // a version takes the next one as a restart would, not refuse it for
    // ever (the skip is logged).
    let verified = match (
        check_config(&bytes, &signature, public, None, clock),
        expired,
    ) {
        (Err(VerifyError::Expired { expires_at, now }), Some(StartExpired::Within { grace_s }))
            if running.is_none() && grace_s > 0 =>
        {
            // An expiry that does not parse is as far past as can be.
            let past = parse_rfc3339(&expires_at)
                .map_or(i64::MAX, |expiry| clock.now().saturating_sub(expiry));
            if past > i64::try_from(grace_s).unwrap_or(i64::MAX) {
                return Err(LoadError::PastGrace {
                    path: path.clone(),
                    expires_at,
                    now,
                    grace_s,
                });
            }
            check_signed(&bytes, &signature, public).map_err(refused)?
        }
        (Err(VerifyError::Expired { .. }), Some(StartExpired::Always)) if running.is_none() => {
            check_signed(&bytes, &signature, public).map_err(refused)?
        }
        (checked, _) => checked.map_err(refused)?,
    };
    let config = verified.config;
    let Some(serving) = config.serving.clone() else {
        return Err(LoadError::NotServable {
            path: path.clone(),
            schema: config.schema.clone(),
        });
    };
    let router = pinned_router(serving.scorer.as_ref(), sources, path)?;
    let verifier = pinned_verifier(serving.verifier.as_ref(), path)?;
    let upstreams = upstreams_of(&config, sources, path)?;
    let expires_at = parse_rfc3339(&config.expires_at).unwrap_or(i64::MIN);
    Ok(Deployed {
        config,
        sha256: verified.sha256,
        bytes,
        signature,
        serving,
        router,
        verifier,
        upstreams,
        expires_at,
    })
}

/// The refusal of a config whose pins this serve cannot honour.
fn pin_error(path: &Path, problem: String) -> LoadError {
    LoadError::Pin {
        path: path.to_owned(),
        problem,
    }
}

/// The built-in router the config pins, read from `--router` and checked
/// against its sha256; none for an external scorer or no scorer.
fn pinned_router(
    scorer: Option<&Scorer>,
    sources: &Sources,
    path: &Path,
) -> Result<Option<Arc<Router>>, LoadError> {
    let pin = |problem| pin_error(path, problem);
    Ok(match scorer {
        Some(Scorer::Builtin {
            sha256,
            format,
            features,
        }) => {
            if !ROUTER_FORMATS.contains(&format.as_str()) || features != FEATURES_VERSION {
                return Err(pin(format!(
                    "serving.scorer pins a router of format {format} scoring with {features:?}; this routeval loads {} with {FEATURES_VERSION:?}",
                    ROUTER_FORMATS.join(" or ")
                )));
            }
            let router_path = sources.router.as_ref().ok_or_else(|| {
                pin(format!(
                    "the predictive policy scores with the built-in router of sha256 {sha256}; pass it with --router"
                ))
            })?;
            let file = std::fs::read(router_path).map_err(|error| {
                LoadError::Unreadable(format!(
                    "{}: cannot read the router (--router): {error}",
                    router_path.display()
                ))
            })?;
            let found = sha256_hex(&file);
            if found != *sha256 {
                return Err(pin(format!(
                    "--router {} has sha256 {found}, the config pins {sha256}: it is not the router the thresholds were calibrated on",
                    router_path.display()
                )));
            }
            let router = Router::from_bytes(&file, router_path)
                .map_err(|error| LoadError::Unreadable(format!("{error:#}")))?;
            Some(Arc::new(router))
        }
        Some(Scorer::External(_)) | None => None,
    })
}

/// The cascade's verifier, its prompt template checked against its sha256.
fn pinned_verifier(
    verifier: Option<&PinnedVerifier>,
    path: &Path,
) -> Result<Option<Verifier>, LoadError> {
    let pin = |problem| pin_error(path, problem);
    Ok(match verifier {
        Some(pinned) => {
            let found = sha256_hex(pinned.template_toml.as_bytes());
            if found != pinned.template_sha256 {
                return Err(pin(format!(
                    "serving.verifier.template_toml has sha256 {found}, the config pins {}",
                    pinned.template_sha256
                )));
            }
            let template: PromptTemplate =
                toml::from_str(&pinned.template_toml).map_err(|error| {
                    pin(format!(
                        "serving.verifier.template_toml: {}",
                        crate::toml_message::one_line(&error.to_string())
                    ))
                })?;
            Some(Verifier {
                route: pinned.route.clone(),
                template,
                score: pinned.score,
                max_tokens: pinned.max_tokens,
            })
        }
        None => None,
    })
}

/// Each route's endpoint: its URL, model, key (from the environment
/// variable it names) and prices.
fn upstreams_of(
    config: &RouteConfig,
    sources: &Sources,
    path: &Path,
) -> Result<BTreeMap<String, Upstream>, LoadError> {
    let pin = |problem| pin_error(path, problem);
    // With --provider-keys the routes' variables come from it alone: a
    // variable dropped from it must not fall back, silently, to a stale
    // value in the environment.
    let variables = match &sources.provider_keys {
        Some(keys) => std::borrow::Cow::Owned(super::provider_keys::read(keys)?),
        None => std::borrow::Cow::Borrowed(&sources.env),
    };
    let mut upstreams = BTreeMap::new();
    for route in &config.table.routes {
        let base_url = route.base_url.as_ref().ok_or_else(|| {
            pin(format!(
                "route {:?} has no base_url; serve calls each route's OpenAI-compatible endpoint",
                route.name
            ))
        })?;
        let api_key = match &route.api_key_env {
            Some(variable) => Some(
                variables
                    .get(variable)
                    .cloned()
                    .ok_or_else(|| {
                        pin(match &sources.provider_keys {
                            None => format!(
                                "route {:?}: the environment variable {variable} (api_key_env) is not set",
                                route.name
                            ),
                            Some(keys) => format!(
                                "route {:?}: the variable {variable} (api_key_env) is not in --provider-keys {}",
                                route.name,
                                keys.display()
                            ),
                        })
                    })?,
            ),
            None => None,
        };
        upstreams.insert(
            route.name.clone(),
            Upstream {
                chat_url: format!("{}/chat/completions", base_url.trim_end_matches('/')),
                model: route.model.clone(),
                api_key,
                prices: TokenPrices {
                    input_per_mtok: route.price_input_per_mtok,
                    cached_input_per_mtok: route.price_cached_input_per_mtok,
                    output_per_mtok: route.price_output_per_mtok,
                },
            },
        );
    }
    Ok(upstreams)
}

impl Deployed {
    pub fn expired(&self, clock: &dyn Clock) -> bool {
        clock.now() >= self.expires_at
    }

    /// The same signed config with its routes' keys read again (from
    /// `--provider-keys`, or else the environment): a rotated provider key,
    /// put in place without a new version.
    pub fn with_keys_from(&self, sources: &Sources) -> Result<Deployed, LoadError> {
        Ok(Deployed {
            config: self.config.clone(),
            sha256: self.sha256.clone(),
            bytes: self.bytes.clone(),
            signature: self.signature.clone(),
            serving: self.serving.clone(),
            router: self.router.clone(),
            verifier: self.verifier.clone(),
            upstreams: upstreams_of(&self.config, sources, &sources.config)?,
            expires_at: self.expires_at,
        })
    }
}

/// What a records directory remembers of the last config served into it,
/// so a restart with an older config is a refused rollback too.
const LAST_SERVED: &str = ".routeval-serve-config.json";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct LastServed {
    logical_model: String,
    version: u64,
    sha256: String,
}

/// Refuses `deployed` when the records directory last served a later
/// version of the same logical model, or the same version with other bytes.
pub fn check_not_rolled_back(
    records: &Path,
    config: &Path,
    deployed: &Deployed,
) -> Result<(), LoadError> {
    let path = records.join(LAST_SERVED);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let last: LastServed = serde_json::from_str(&text).map_err(|error| {
        LoadError::Unreadable(format!(
            "{}: not what serve writes: {error}",
            path.display()
        ))
    })?;
    let path = config.to_owned();
    let config = &deployed.config;
    if last.logical_model != config.table.logical_model {
        return Ok(());
    }
    if config.version < last.version
        || (config.version == last.version && deployed.sha256 != last.sha256)
    {
        return Err(LoadError::Pin {
            path,
            problem: format!(
                "version {} (sha256 {}) is a rollback: version {} (sha256 {}) was last served into {}",
                config.version,
                deployed.sha256,
                last.version,
                last.sha256,
                records.display()
            ),
        });
    }
    Ok(())
}

/// Remembers `deployed` as the last config served into `records`.
pub fn remember_served(records: &Path, deployed: &Deployed) -> anyhow::Result<()> {
    let last = LastServed {
        logical_model: deployed.config.table.logical_model.clone(),
        version: deployed.config.version,
        sha256: deployed.sha256.clone(),
    };
    let bytes = serde_json::to_vec(&last)?;
    crate::atomic::Staged::new(&records.join(LAST_SERVED), |file| {
        std::io::Write::write_all(file, &bytes)?;
        Ok(())
    })?
    .commit()
}

/// The sha256 of a config file's bytes and of its signature's.
pub type Fingerprint = (String, String);

/// The file's identity for the reload watch: its content and its
/// signature's, by digest. Lengths and modification times would miss a
/// replacement of the same length whose time a deploy tool restored.
pub fn fingerprint(path: &Path) -> Option<Fingerprint> {
    let config = std::fs::read(path).ok()?;
    let signature = std::fs::read(crate::routes::signature_path(path)).ok()?;
    Some((
        crate::digest::sha256_hex(&config),
        crate::digest::sha256_hex(&signature),
    ))
}

/// What a start (a restart) does with a config that has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartExpired {
    /// Starts on it however long ago it expired (`--expired start`).
    Always,
    /// Starts on it within this many seconds of its expiry, and refuses it
    /// after (`--expired refuse`, `--expired-grace-s`; 0 refuses at once).
    Within { grace_s: u64 },
}
