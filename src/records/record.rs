//! One request record, as every reader, importer and serve hold it, and
//! as serve's journal writes it: a JSON object of its columns.

use std::borrow::Cow;

use super::reason::Reason;
use super::schema::field::*;
use super::schema::{Draw, RECORD_COLUMNS, Status, TokenSource};

/// One request, checked. Texts borrow from the row being read.
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    pub id: Cow<'a, str>,
    /// Milliseconds since 1970.
    pub timestamp_ms: i64,
    pub slice: Cow<'a, str>,
    pub logical_model: Option<Cow<'a, str>>,
    pub route: Cow<'a, str>,
    pub model: Option<Cow<'a, str>>,
    pub reason: Option<Reason>,
    pub score: Option<f64>,
    pub status: Status,
    pub input_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub ttft_ms: Option<f64>,
    pub total_ms: Option<f64>,
    pub finish_reason: Option<Cow<'a, str>>,
    pub cost_usd: Option<f64>,
    pub prompt: Option<Cow<'a, str>>,
    pub messages: Option<Cow<'a, str>>,
    /// The signed config that decided the request, where serve wrote it.
    pub config_version: Option<u64>,
    pub config_sha256: Option<Cow<'a, str>>,
    /// What `serve --shadow`'s candidate would have decided.
    pub shadow_route: Option<Cow<'a, str>>,
    pub shadow_reason: Option<Reason>,
    pub shadow_score: Option<f64>,
    pub shadow_config_version: Option<u64>,
    /// The probability the signed policy gave the tier the request went
    /// to, and whether an exploration draw chose it (serve's records).
    pub propensity: Option<f64>,
    pub draw: Option<Draw>,
    /// The route the decision chose, before any fallback.
    pub decided_route: Option<Cow<'a, str>>,
    /// Whether the token counts are the provider's or estimated.
    pub token_source: Option<TokenSource>,
    /// The tenant of the client's key, where serve knew it.
    pub tenant: Option<Cow<'a, str>>,
}

impl Record<'static> {
    /// A record of what every record has: the request, when it arrived,
    /// its slice, the route and how it ended; the rest unknown.
    pub fn new(
        id: String,
        timestamp_ms: i64,
        slice: String,
        route: String,
        status: Status,
    ) -> Record<'static> {
        Record {
            id: Cow::Owned(id),
            timestamp_ms,
            slice: Cow::Owned(slice),
            logical_model: None,
            route: Cow::Owned(route),
            model: None,
            reason: None,
            score: None,
            status,
            input_tokens: None,
            cached_input_tokens: None,
            output_tokens: None,
            ttft_ms: None,
            total_ms: None,
            finish_reason: None,
            cost_usd: None,
            prompt: None,
            messages: None,
            config_version: None,
            config_sha256: None,
            shadow_route: None,
            shadow_reason: None,
            shadow_score: None,
            shadow_config_version: None,
            propensity: None,
            draw: None,
            decided_route: None,
            token_source: None,
            tenant: None,
        }
    }
}

impl Record<'_> {
    /// The request's prompt: its `prompt`, or, where serve keeps it once,
    /// the last user message of its `messages`.
    pub fn prompt_text(&self) -> Option<Cow<'_, str>> {
        match &self.prompt {
            Some(prompt) => Some(Cow::Borrowed(prompt)),
            None => {
                let messages = serde_json::from_str(self.messages.as_deref()?).ok()?;
                super::log_fields::last_user_message(&messages).map(Cow::Owned)
            }
        }
    }

    /// The record with every text owned, to keep beyond the row.
    pub fn into_owned(self) -> Record<'static> {
        let own = |text: Cow<'_, str>| Cow::Owned(text.into_owned());
        Record {
            id: own(self.id),
            timestamp_ms: self.timestamp_ms,
            slice: own(self.slice),
            logical_model: self.logical_model.map(own),
            route: own(self.route),
            model: self.model.map(own),
            reason: self.reason,
            score: self.score,
            status: self.status,
            input_tokens: self.input_tokens,
            cached_input_tokens: self.cached_input_tokens,
            output_tokens: self.output_tokens,
            ttft_ms: self.ttft_ms,
            total_ms: self.total_ms,
            finish_reason: self.finish_reason.map(own),
            cost_usd: self.cost_usd,
            prompt: self.prompt.map(own),
            messages: self.messages.map(own),
            config_version: self.config_version,
            config_sha256: self.config_sha256.map(own),
            shadow_route: self.shadow_route.map(own),
            shadow_reason: self.shadow_reason,
            shadow_score: self.shadow_score,
            shadow_config_version: self.shadow_config_version,
            propensity: self.propensity,
            draw: self.draw,
            decided_route: self.decided_route.map(own),
            token_source: self.token_source,
            tenant: self.tenant.map(own),
        }
    }
}

/// A record as a JSON object of its columns (what serve's journal writes,
/// a line each), by the names in [`RECORD_COLUMNS`].
impl serde::Serialize for Record<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let name = |field: usize| RECORD_COLUMNS[field].name;
        let mut object = serializer.serialize_struct("Record", RECORD_COLUMNS.len())?;
        object.serialize_field(name(ID), &self.id)?;
        object.serialize_field(name(TIMESTAMP), &self.timestamp_ms)?;
        object.serialize_field(name(SLICE), &self.slice)?;
        object.serialize_field(name(LOGICAL_MODEL), &self.logical_model)?;
        object.serialize_field(name(ROUTE), &self.route)?;
        object.serialize_field(name(MODEL), &self.model)?;
        object.serialize_field(name(REASON), &self.reason)?;
        object.serialize_field(name(SCORE), &self.score)?;
        object.serialize_field(name(STATUS), self.status.name())?;
        object.serialize_field(name(INPUT_TOKENS), &self.input_tokens)?;
        object.serialize_field(name(CACHED_INPUT_TOKENS), &self.cached_input_tokens)?;
        object.serialize_field(name(OUTPUT_TOKENS), &self.output_tokens)?;
        object.serialize_field(name(TTFT_MS), &self.ttft_ms)?;
        object.serialize_field(name(TOTAL_MS), &self.total_ms)?;
        object.serialize_field(name(FINISH_REASON), &self.finish_reason)?;
        object.serialize_field(name(COST_USD), &self.cost_usd)?;
        object.serialize_field(name(PROMPT), &self.prompt)?;
        object.serialize_field(name(MESSAGES), &self.messages)?;
        object.serialize_field(name(CONFIG_VERSION), &self.config_version)?;
        object.serialize_field(name(CONFIG_SHA256), &self.config_sha256)?;
        object.serialize_field(name(SHADOW_ROUTE), &self.shadow_route)?;
        object.serialize_field(name(SHADOW_REASON), &self.shadow_reason)?;
        object.serialize_field(name(SHADOW_SCORE), &self.shadow_score)?;
        object.serialize_field(name(SHADOW_CONFIG_VERSION), &self.shadow_config_version)?;
        object.serialize_field(name(PROPENSITY), &self.propensity)?;
        object.serialize_field(name(DRAW), &self.draw.map(Draw::name))?;
        object.serialize_field(name(DECIDED_ROUTE), &self.decided_route)?;
        object.serialize_field(
            name(TOKEN_SOURCE),
            &self.token_source.map(TokenSource::name),
        )?;
        object.serialize_field(name(TENANT), &self.tenant)?;
        object.end()
    }
}
