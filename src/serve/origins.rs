//! The browser origins an operator lets call serve (`--cors-origin`),
//! checked as they are given; [`super::stack`]'s CORS layer answers them.

use axum::http::HeaderValue;

/// The browser origins allowed to call serve (`--cors-origin`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CorsOrigins {
    /// No CORS header is ever sent.
    #[default]
    None,
    /// Any origin (`*`): a public endpoint whose clients bring their key.
    Any,
    /// Exactly these, each `scheme://host[:port]`.
    Listed(Vec<String>),
}

impl CorsOrigins {
    /// The origins `--cors-origin` gave, each checked: `*`, or an origin
    /// as a browser sends it (`https://app.example.com`, no path).
    pub fn parse(values: &[String]) -> Result<CorsOrigins, String> {
        if values.is_empty() {
            return Ok(CorsOrigins::None);
        }
        if values.iter().any(|value| value == "*") {
            return match values.len() {
                1 => Ok(CorsOrigins::Any),
                _ => Err("--cors-origin: `*` allows every origin; give it alone".to_owned()),
            };
        }
        values
            .iter()
            .map(|value| origin(value).map(str::to_owned))
            .collect::<Result<_, _>>()
            .map(CorsOrigins::Listed)
    }

    /// The `Access-Control-Allow-Origin` value for a request from
    /// `origin`, if it is allowed.
    pub(super) fn allows(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        match self {
            CorsOrigins::None => None,
            CorsOrigins::Any => Some(HeaderValue::from_static("*")),
            CorsOrigins::Listed(listed) => {
                let sent = origin.to_str().ok()?;
                listed
                    .iter()
                    .any(|allowed| allowed.eq_ignore_ascii_case(sent))
                    .then(|| origin.clone())
            }
        }
    }
}

/// `value` if it is an origin as a browser sends one.
fn origin(value: &str) -> Result<&str, String> {
    let bad = |why: &str| Err(format!("--cors-origin {value:?}: {why}"));
    let Some((scheme, rest)) = value.split_once("://") else {
        return bad("an origin is scheme://host[:port], e.g. https://app.example.com");
    };
    if scheme != "http" && scheme != "https" {
        return bad("the scheme is http or https");
    }
    let well_formed = !rest.is_empty()
        && rest
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-.:[]".contains(&byte));
    if !well_formed {
        return bad("an origin has no path, query or trailing slash: scheme://host[:port]");
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_exact_and_star_stands_alone() {
        assert_eq!(CorsOrigins::parse(&[]), Ok(CorsOrigins::None));
        assert_eq!(CorsOrigins::parse(&["*".into()]), Ok(CorsOrigins::Any));
        let listed = CorsOrigins::parse(&[
            "https://app.example.com".into(),
            "http://127.0.0.1:5173".into(),
        ])
        .unwrap();
        assert_eq!(
            listed.allows(&HeaderValue::from_static("http://127.0.0.1:5173")),
            Some(HeaderValue::from_static("http://127.0.0.1:5173"))
        );
        for refused in [
            "https://app.example.com.evil.test",
            "http://app.example.com",
            "null",
        ] {
            assert_eq!(
                listed.allows(&HeaderValue::from_static(refused)),
                None,
                "{refused}"
            );
        }
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "ftp://x",
            "https://a/b",
        ] {
            let refused = CorsOrigins::parse(&[bad.into()]).unwrap_err();
            assert!(refused.starts_with("--cors-origin"), "{refused}");
        }
        assert!(CorsOrigins::parse(&["*".into(), "https://a".into()]).is_err());
    }
}
