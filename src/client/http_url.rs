//! The URLs routeval sends to (an endpoint, routeval serve, a collector):
//! plain or TLS HTTP, nothing else, checked where a flag gives one.

/// `text` if it is an `http://` or `https://` URL with a host: a flag's
/// value parser.
pub fn parse_http_url(text: &str) -> Result<String, String> {
    let host = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match host {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(text.to_owned()),
        _ => Err(format!("{text}: an http:// or https:// URL with a host")),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_http_url;

    #[test]
    fn only_http_and_https_urls_with_a_host_pass() {
        for good in [
            "http://collector:4318/v1/traces",
            "https://serve.internal/v1",
        ] {
            assert_eq!(parse_http_url(good).as_deref(), Ok(good));
        }
        for bad in [
            "serve:8090",
            "ftp://host/",
            "http://",
            "https:///v1",
            "HTTP//x",
        ] {
            assert_eq!(
                parse_http_url(bad),
                Err(format!("{bad}: an http:// or https:// URL with a host"))
            );
        }
    }
}
