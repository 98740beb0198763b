//! The prompt templates of verifiers and judges,
//! `rubrics/prompts/NAME.toml`.

use std::path::Path;

use serde::Deserialize;

/// A prompt of the verifier or a judge: `{question}`, `{answer}` and, for
/// judges, `{reference}` and `{criteria}` are replaced.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTemplate {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub system: Option<String>,
    pub user: String,
}

impl PromptTemplate {
    pub fn load(rubrics: &Path, name: &str) -> anyhow::Result<PromptTemplate> {
        PromptTemplate::load_requiring(rubrics, name, &["{question}", "{answer}"])
    }

    /// The template `rubrics/prompts/NAME.toml`, whose user prompt must
    /// hold every one of `placeholders`.
    pub fn load_requiring(
        rubrics: &Path,
        name: &str,
        placeholders: &[&str],
    ) -> anyhow::Result<PromptTemplate> {
        let path = rubrics.join("prompts").join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path).map_err(|error| {
            anyhow::anyhow!("{}: cannot read the template: {error}", path.display())
        })?;
        let template: PromptTemplate = toml::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                crate::toml_message::one_line(&error.to_string())
            )
        })?;
        for placeholder in placeholders {
            if !template.user.contains(placeholder) {
                anyhow::bail!(
                    "{}: field \"user\" must contain {placeholder}",
                    path.display()
                );
            }
        }
        Ok(template)
    }

    /// The messages with each `{placeholder}` of `values` replaced.
    pub fn render(&self, values: &[(&str, &str)]) -> Vec<crate::schema::Message> {
        use crate::schema::{Message, Role};
        let user = values
            .iter()
            .fold(self.user.clone(), |text, (placeholder, value)| {
                text.replace(placeholder, value)
            });
        self.system
            .iter()
            .map(|system| Message {
                role: Role::System,
                content: system.clone(),
            })
            .chain(std::iter::once(Message {
                role: Role::User,
                content: user,
            }))
            .collect()
    }
}
