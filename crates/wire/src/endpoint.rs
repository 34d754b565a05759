//! The endpoint rule of canon-wire.md §1.1: every Canon URL (REST base, stream base) uses
//! `https`, or `http` only when its host is exactly `localhost`, `127.0.0.1` or `::1`, so the
//! API key in the `Authorization` header never travels in clear to another host. The resolver
//! of canon-profiles checks it with its parity message, and canon-transport refuses to build a
//! client over a URL that breaks it, whatever the caller resolved.

/// Whether `url` is `https`, or `http` with the host exactly `localhost`, `127.0.0.1` or `::1`
/// (scheme and host compared case-insensitively, as Python's `urlparse` lower-cases them).
pub fn is_secure_or_local(url: &str) -> bool {
    let Some((scheme, _)) = url.split_once("://") else {
        return false;
    };
    match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => matches!(
            url_host(url).as_deref(),
            Some("localhost" | "127.0.0.1" | "::1")
        ),
        _ => false,
    }
}

/// The host of `scheme://[user@]host[:port]/…`, lower-cased, without IPv6 brackets; `None`
/// when there is no authority or it is empty.
pub fn url_host(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_and_http_only_on_the_three_local_hosts() {
        for (url, ok) in [
            ("https://api.example", true),
            ("HTTPS://api.example", true),
            ("http://localhost:9", true),
            ("http://LOCALHOST", true),
            ("http://127.0.0.1:9/x", true),
            ("http://[::1]:9", true),
            ("http://user@127.0.0.1", true),
            ("http://127.0.0.2", false),
            ("http://localhost.example", false),
            ("http://127.0.0.1.example", false),
            ("http://10.0.0.1", false),
            ("http://api.canonmail.com", false),
            ("http://localhost@api.example", false),
            ("ftp://api.example", false),
            ("api.example", false),
            ("ws://127.0.0.1", false),
        ] {
            assert_eq!(is_secure_or_local(url), ok, "{url}");
        }
    }

    #[test]
    fn url_host_parsing() {
        for (url, host) in [
            ("https://Example.COM:443/path?q#f", Some("example.com")),
            ("http://u:p@127.0.0.1:80", Some("127.0.0.1")),
            ("http://[::1]:8080/", Some("::1")),
            ("https://", None),
            ("no-scheme", None),
        ] {
            assert_eq!(url_host(url).as_deref(), host, "{url}");
        }
    }
}
