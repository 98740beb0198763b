//! Secrets out of text a person or a file keeps: keys, tokens, private
//! keys and assigned passwords replaced by `[redacted]`, as `sample` takes
//! prompts for labelling and `serve --records-prompts redacted` keeps them.

use std::sync::LazyLock;

use regex::Regex;

/// Secrets by their shape, as gitleaks' and detect-secrets' rules find
/// them: the value itself is replaced.
static SECRETS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
        // OpenAI, Anthropic and other `sk-` keys.
        r"\bsk-[A-Za-z0-9_-]{16,}",
        // Stripe live and test keys, secret and restricted.
        r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
        // AWS access key ids.
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
        // Google API keys.
        r"\bAIza[0-9A-Za-z_-]{35}",
        // GitHub tokens, classic and fine-grained.
        r"\bgh[pousr]_[A-Za-z0-9]{30,}",
        r"\bgithub_pat_[A-Za-z0-9_]{40,}",
        // GitLab, npm, Hugging Face, SendGrid.
        r"\bglpat-[0-9A-Za-z_-]{20,}",
        r"\bnpm_[A-Za-z0-9]{36}",
        r"\bhf_[A-Za-z0-9]{30,}",
        r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
        // Slack tokens and incoming webhooks.
        r"\bxox[abprse]-[A-Za-z0-9-]{10,}",
        r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]+",
        // Bearer and HTTP Basic credentials.
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*",
        r"(?i)\bbasic\s+[A-Za-z0-9+/]{8,}={0,2}",
        // JSON web tokens.
        r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    ]
    .iter()
    .map(|pattern| Regex::new(pattern).expect("a valid pattern"))
    .collect()
});

/// Secrets by their place: the value given to a secret's name (`password:
/// x`, `api key = x`, `aws_secret_access_key=x`, `the password is x`) and
/// the password in a URL's credentials (`postgres://user:x@host`).
static PLACED_SECRETS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"(?i)(\b[a-z0-9_]*(?:password|passwd|pwd|passphrase|api[_ -]?key|secret|token|access[_ -]?key|credentials?)[a-z0-9_]*\b(?:\s+(?:is|was))?\s*[:=]?\s*)([^\s,;]+)",
        r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)",
    ]
    .iter()
    .map(|pattern| Regex::new(pattern).expect("a valid pattern"))
    .collect()
});

const REDACTED: &str = "[redacted]";

/// `text` with keys, tokens, private keys and assigned passwords replaced
/// by `[redacted]`, and how many were.
pub fn redact(text: &str) -> (String, u64) {
    let mut count = 0u64;
    let mut out = text.to_owned();
    for pattern in SECRETS.iter() {
        let found = pattern.find_iter(&out).count() as u64;
        if found > 0 {
            count += found;
            out = pattern.replace_all(&out, REDACTED).into_owned();
        }
    }
    for pattern in PLACED_SECRETS.iter() {
        let mut found = 0u64;
        out = pattern
            .replace_all(&out, |captures: &regex::Captures<'_>| {
                let value = &captures[2];
                // A value already redacted by its shape, or a plain word
                // after a name used in a sentence ("my password yesterday").
                if value.starts_with(REDACTED) || !looks_like_a_value(&captures[1], value) {
                    return captures[0].to_owned();
                }
                found += 1;
                let tail = captures.get(3).map_or("", |tail| tail.as_str());
                format!("{}{REDACTED}{tail}", &captures[1])
            })
            .into_owned();
        count += found;
    }
    (out, count)
}

/// Whether `value`, after the name part `lead`, is a secret's value: given
/// with `:`, `=` or "is", or in a URL's credentials; a word after a bare name
/// is prose.
fn looks_like_a_value(lead: &str, value: &str) -> bool {
    let lead = lead.trim_end().to_ascii_lowercase();
    lead.ends_with(':')
        || lead.ends_with('=')
        || lead.ends_with(" is")
        || lead.ends_with(" was")
        || (lead.contains("://") && !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_ordinary_text_is_not() {
        let (text, count) = redact(
            "my key is sk-proj-abcdefghijklmnop1234 and password: hunter2, token=abc.def; AKIAABCDEFGHIJKLMNOP",
        );
        assert_eq!(count, 4, "{text}");
        assert!(!text.contains("hunter2") && !text.contains("sk-proj") && !text.contains("AKIA"));
        assert!(text.contains("password: [redacted]"), "{text}");
        let plain = "Where is order ORD-12345? I reset my password yesterday.";
        assert_eq!(redact(plain), (plain.to_owned(), 0));
    }

    #[test]
    fn every_common_secret_shape_is_redacted() {
        let shapes = [
            (
                "a Stripe key",
                "charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc now",
                "4eC39HqLyjWDarjtT1zdp7dc",
            ),
            (
                "a Google API key",
                "key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe ok",
                "AIzaSyDaGmWKa4JsXZ",
            ),
            (
                "an AWS secret",
                "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "wJalrXUtnFEMI",
            ),
            (
                "a database URL's password",
                "connect to postgres://admin:s3cr3t-pw@db.internal:5432/app",
                "s3cr3t-pw",
            ),
            (
                "HTTP Basic credentials",
                "Authorization: Basic dXNlcjpwYXNzd29yZA==",
                "dXNlcjpwYXNzd29yZA",
            ),
            (
                "a password in a sentence",
                "my new password is Tr0ub4dor&3 please",
                "Tr0ub4dor&3",
            ),
            (
                "an API key with a space",
                "here is the api key: 9f8e7d6c5b4a39281706",
                "9f8e7d6c5b4a39281706",
            ),
            (
                "a Slack webhook",
                "post to https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
                "hooks.slack.com/services/T000",
            ),
            (
                "a GitHub token",
                "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "ghp_abcdefghij",
            ),
            (
                "a GitLab token",
                "use glpat-abcdefghij0123456789 here",
                "glpat-abcdef",
            ),
            (
                "an npm token",
                "npm_abcdefghijklmnopqrstuvwxyz0123456789 works",
                "npm_abcdefghijk",
            ),
            (
                "a SendGrid key",
                "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789abcdefg",
                "SG.abcdefghij",
            ),
            (
                "a bearer token",
                "Authorization: Bearer abcdefghijklmnopqrstuvwxyz",
                "abcdefghijklmnop",
            ),
        ];
        for (shape, text, secret) in shapes {
            let (redacted, count) = redact(text);
            assert!(count >= 1, "{shape}: nothing redacted in {redacted:?}");
            assert!(!redacted.contains(secret), "{shape}: {redacted:?}");
            assert!(redacted.contains("[redacted]"), "{shape}: {redacted:?}");
        }
        // Prose that names a secret without giving one is left alone.
        for plain in [
            "I forgot my password and the token expired.",
            "Which API key do I use for the sandbox?",
            "Open https://example.com/docs/keys for help.",
        ] {
            assert_eq!(redact(plain), (plain.to_owned(), 0), "{plain}");
        }
    }
}
