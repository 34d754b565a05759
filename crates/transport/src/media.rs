//! The SSRF-guarded media download of canon-wire.md §7.2 (T6).
//!
//! Every URL — the first one and every redirect target — is checked before
//! anything connects: scheme `http`/`https`, a non-empty host, never a
//! metadata host name, and every address the host resolves to must pass
//! [`check_ip`]. The connector resolves once and
//! connects only to the addresses it checked, so DNS rebinding between check
//! and connect is impossible. At most [`MAX_REDIRECTS`] redirects are
//! followed; the body is capped at 10 MiB whether or not the server sends
//! `Content-Length` (the download stops as soon as the cap is crossed).
//! Requests carry only `User-Agent: HermesAgent/CanonPlatform` — never an
//! `Authorization` header.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Uri};

use crate::client::MAX_MEDIA_BYTES;
use crate::error::{HttpFailure, TransportError};
use crate::http::{blocked_in_chain, read_body, BodyCap, HttpEngine, Timeouts};
use crate::net::{
    check_ip, host_always_blocked, uri_host, AddressPolicy, Resolver, SystemResolver,
};
use canon_wire::retry::RetryClass;

/// Redirects followed at most (canon-wire.md §7.2 \[target\]).
pub const MAX_REDIRECTS: usize = 5;

/// `User-Agent` of media downloads (canon-wire.md §2.1, \[parity\]).
pub const MEDIA_USER_AGENT: &str = "HermesAgent/CanonPlatform";

/// Characters of a safe URL in an error (canon-wire.md §7.2).
const SAFE_URL_CHARS: usize = 80;

/// Options of a [`MediaDownloader`].
#[derive(Clone)]
pub struct MediaOptions {
    /// Which addresses may be reached. `allow_private` mirrors
    /// `HERMES_ALLOW_PRIVATE_URLS`, which the binary reads and passes in.
    pub policy: AddressPolicy,
    /// Body cap in bytes (10 MiB).
    pub max_bytes: usize,
    /// Connect/read timeouts (30 s each, as REST).
    pub timeouts: Timeouts,
    /// Name resolution (the system resolver by default).
    pub resolver: Arc<dyn Resolver>,
}

impl Default for MediaOptions {
    fn default() -> Self {
        MediaOptions {
            policy: AddressPolicy::default(),
            max_bytes: MAX_MEDIA_BYTES,
            timeouts: Timeouts::default(),
            resolver: Arc::new(SystemResolver),
        }
    }
}

impl std::fmt::Debug for MediaOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaOptions")
            .field("policy", &self.policy)
            .field("max_bytes", &self.max_bytes)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// A downloaded body.
#[derive(Debug, Clone, PartialEq)]
pub struct DownloadedMedia {
    /// The bytes (≤ the cap).
    pub bytes: Bytes,
    /// `Content-Type` without parameters, lower-cased (the fallback MIME type).
    pub content_type: Option<String>,
    /// The URL the bytes finally came from.
    pub final_url: String,
}

/// Downloads media URLs behind the SSRF guard.
#[derive(Clone)]
pub struct MediaDownloader {
    engine: HttpEngine,
    options: MediaOptions,
}

impl std::fmt::Debug for MediaDownloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaDownloader")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `scheme://host/.../last-segment`, no user-info, query or fragment, ≤ 80
/// chars (canon-wire.md §7.2).
pub fn safe_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or_default();
    let last = path.rsplit('/').find(|s| !s.is_empty());
    let safe = match last {
        Some(last) => format!("{scheme}://{host}/.../{last}"),
        None => format!("{scheme}://{host}/"),
    };
    safe.chars().take(SAFE_URL_CHARS).collect()
}

/// Resolves a `Location` value against the URL that returned it.
fn resolve_location(base: &Uri, location: &str) -> Option<Uri> {
    let location = location.trim();
    let scheme = base.scheme_str()?;
    let authority = base.authority()?.as_str();
    let absolute = if location.starts_with("//") {
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else if location
        .split_once("://")
        .is_some_and(|(s, _)| !s.is_empty() && !s.contains(['/', '?', '#']))
    {
        location.to_owned()
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let dir = if dir.is_empty() { "/" } else { dir };
        format!("{scheme}://{authority}{dir}{location}")
    };
    absolute.parse().ok()
}

impl MediaDownloader {
    /// A downloader with its own connection pool.
    pub fn new(options: MediaOptions) -> MediaDownloader {
        let engine = HttpEngine::new(
            options.resolver.clone(),
            Some(options.policy),
            options.timeouts,
            &[],
        );
        MediaDownloader { engine, options }
    }

    /// The most recent addresses (at most 256) a TCP connect was attempted to,
    /// oldest first (for tests and diagnostics).
    pub fn connect_attempts(&self) -> Vec<std::net::SocketAddr> {
        self.engine.connect_attempts()
    }

    /// Pre-flight checks that need no resolution.
    fn precheck(&self, uri: &Uri, url: &str, redirect: bool) -> Result<(), TransportError> {
        let blocked = || TransportError::Blocked {
            safe_url: safe_url(url),
            redirect,
        };
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) {
            return Err(blocked());
        }
        let host = uri_host(uri).ok_or_else(blocked)?;
        if host_always_blocked(host) {
            return Err(blocked());
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            check_ip(ip, self.options.policy).map_err(|_| blocked())?;
        }
        Ok(())
    }

    /// Downloads `url` (canon-wire.md §4.14, §7.2), following at most five checked redirects.
    pub async fn download(&self, url: &str) -> Result<DownloadedMedia, TransportError> {
        let mut current = url.trim().to_owned();
        let mut redirect = false;
        for _ in 0..=MAX_REDIRECTS {
            let uri: Uri = current.parse().map_err(|_| TransportError::Blocked {
                safe_url: safe_url(&current),
                redirect,
            })?;
            self.precheck(&uri, &current, redirect)?;
            let request = Request::get(uri.clone())
                .header("user-agent", MEDIA_USER_AGENT)
                .body(Full::new(Bytes::new()))
                .map_err(|_| TransportError::Blocked {
                    safe_url: safe_url(&current),
                    redirect,
                })?;
            let response = match self
                .engine
                .send_head(request, self.options.timeouts.read)
                .await
            {
                Ok(response) => response,
                Err(err) if blocked_in_chain(&err) => {
                    tracing::warn!(url = %safe_url(&current), redirect, "media url refused by the SSRF guard");
                    return Err(TransportError::Blocked {
                        safe_url: safe_url(&current),
                        redirect,
                    });
                }
                Err(err) => return Err(err),
            };
            let status = response.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let location = response
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let Some(next) = location.as_deref().and_then(|l| resolve_location(&uri, l)) else {
                    return Err(TransportError::protocol(format!(
                        "redirect {status} without a usable Location"
                    )));
                };
                current = next.to_string();
                redirect = true;
                continue;
            }
            if status >= 400 {
                let body = read_body(
                    response.into_body(),
                    self.options.timeouts.read,
                    Some(tokio::time::Instant::now() + self.options.timeouts.read),
                    BodyCap::Protocol(64 * 1024),
                )
                .await
                .unwrap_or_default();
                return Err(TransportError::Http {
                    failure: HttpFailure::from_response(status, None, &body),
                    retry: RetryClass::from_bool(canon_wire::retry::retryable_status(status)),
                });
            }
            let too_large = TransportError::TooLarge {
                limit: self.options.max_bytes as u64,
                upload: false,
            };
            let declared = response
                .headers()
                .get("content-length")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if declared.is_some_and(|len| len > self.options.max_bytes as u64) {
                return Err(too_large);
            }
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .map(|v| v.trim().to_ascii_lowercase())
                .filter(|v| !v.is_empty());
            // The whole download's deadline is the caller's (it knows how long the media may
            // take); each chunk still arrives within the read timeout.
            let bytes = read_body(
                response.into_body(),
                self.options.timeouts.read,
                None,
                BodyCap::Media(self.options.max_bytes),
            )
            .await?;
            return Ok(DownloadedMedia {
                bytes,
                content_type,
                final_url: current,
            });
        }
        Err(TransportError::Protocol {
            detail: format!("more than {MAX_REDIRECTS} redirects"),
            retry: RetryClass::NotRetryable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_url_drops_credentials_query_and_middle_path() {
        assert_eq!(
            safe_url("https://user:pw@example.com/a/b/c.png?token=secret#x"),
            "https://example.com/.../c.png"
        );
        assert_eq!(safe_url("http://10.0.0.1"), "http://10.0.0.1/");
        assert_eq!(safe_url("http://h/"), "http://h/");
        let long = format!("https://example.com/{}", "x".repeat(200));
        assert_eq!(safe_url(&long).chars().count(), 80);
    }

    #[test]
    fn locations_resolve_relative_to_the_base() {
        let base: Uri = "http://127.0.0.1:8080/a/b?q=1".parse().unwrap();
        let check = |location: &str, expected: &str| {
            assert_eq!(
                resolve_location(&base, location)
                    .map(|u| u.to_string())
                    .as_deref(),
                Some(expected),
                "{location}"
            );
        };
        check(
            "http://169.254.169.254/latest",
            "http://169.254.169.254/latest",
        );
        check("//10.0.0.1/x", "http://10.0.0.1/x");
        check("/root", "http://127.0.0.1:8080/root");
        check("sibling", "http://127.0.0.1:8080/a/sibling");
        check("ftp://host/x", "ftp://host/x");
    }
}
