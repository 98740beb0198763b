//! The endpoints a run config names, connected: each with the key its
//! `api_key_env` holds and the verifier's prompt, checked with `GET /models`
//! before the first call.

use std::path::Path;

use super::engine::Endpoints;
use crate::client::{EndpointConfig, OpenAiEndpoint, RunConfig, api_key, preflight};
use crate::rubric::PromptTemplate;

/// One endpoint to call: its config section, its settings and its key.
struct Named<'a> {
    section: String,
    endpoint: &'a EndpointConfig,
    key: Option<String>,
}

/// Every endpoint of a run, its key read and its verifier prompt loaded.
pub struct Connection<'a> {
    config: &'a RunConfig,
    tiers: Vec<Named<'a>>,
    verifier: Option<(Named<'a>, PromptTemplate)>,
    stage_verifiers: Vec<(String, Named<'a>, PromptTemplate)>,
}

/// Names the sections only: a key is never printed.
impl std::fmt::Debug for Connection<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.all().map(|named| &named.section))
            .finish()
    }
}

impl<'a> Connection<'a> {
    /// Reads every key and loads every verifier prompt from `rubrics`
    /// (`prompts/`), before anything is sent.
    pub fn new(config: &'a RunConfig, rubrics: &Path) -> anyhow::Result<Connection<'a>> {
        let named = |section: String, endpoint: &'a EndpointConfig| {
            let key = api_key(config, &section, endpoint)?;
            anyhow::Ok(Named {
                section,
                endpoint,
                key,
            })
        };
        let template = |endpoint: &EndpointConfig| {
            let name = endpoint.template.as_deref().expect("checked on load");
            PromptTemplate::load(rubrics, name)
        };
        let tiers = config
            .tiers
            .iter()
            .map(|tier| named(tier.section(), &tier.endpoint))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let verifier = match &config.verifier {
            Some(verifier) => Some((
                named("[verifier]".to_owned(), verifier)?,
                template(verifier)?,
            )),
            None => None,
        };
        let mut stage_verifiers = Vec::new();
        for (stage, verifier) in &config.stage_verifiers {
            let endpoint = named(format!("[verifiers.{stage}]"), verifier)?;
            stage_verifiers.push((stage.clone(), endpoint, template(verifier)?));
        }
        Ok(Connection {
            config,
            tiers,
            verifier,
            stage_verifiers,
        })
    }

    fn all(&self) -> impl Iterator<Item = &Named<'a>> {
        self.tiers
            .iter()
            .chain(self.verifier.iter().map(|(endpoint, _)| endpoint))
            .chain(self.stage_verifiers.iter().map(|(_, endpoint, _)| endpoint))
    }

    /// Asks each endpoint for its models, in config order: the first that
    /// does not answer is named with its section.
    pub async fn check(&self, http: &reqwest::Client) -> anyhow::Result<()> {
        for named in self.all() {
            preflight(http, named.endpoint, named.key.as_deref())
                .await
                .map_err(|problem| {
                    anyhow::anyhow!(
                        "{}: {}: {problem}",
                        self.config.path.display(),
                        named.section
                    )
                })?;
        }
        Ok(())
    }

    /// The endpoints the run calls, on one shared HTTP client.
    pub fn endpoints(&self, http: &reqwest::Client) -> Endpoints<OpenAiEndpoint> {
        let endpoint = |named: &Named<'_>| {
            OpenAiEndpoint::new(http.clone(), named.endpoint, named.key.clone())
        };
        Endpoints {
            tiers: self.tiers.iter().map(endpoint).collect(),
            verifier: self
                .verifier
                .as_ref()
                .map(|(named, template)| (endpoint(named), template.clone())),
            stage_verifiers: self
                .stage_verifiers
                .iter()
                .map(|(stage, named, template)| {
                    (stage.clone(), (endpoint(named), template.clone()))
                })
                .collect(),
        }
    }
}
