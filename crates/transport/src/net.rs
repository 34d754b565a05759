//! Connection setup: name resolution, the address guard of
//! canon-wire.md §7.2, and the TCP connector hyper-rustls wraps.
//!
//! The connector resolves a host once, checks **every** resolved address
//! against the [`AddressPolicy`] (when one is set) and then connects only to
//! those checked addresses, so a DNS answer cannot change between check and
//! connect. Every address a TCP connect is attempted to is recorded, which
//! lets tests prove that a refused URL caused zero outbound connections.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::BoxError;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Name resolution, injectable so tests never need real DNS.
pub trait Resolver: Send + Sync + 'static {
    /// Resolves `host` (a name, never an IP literal) for `port`.
    fn resolve(&self, host: String, port: u16) -> BoxFuture<io::Result<Vec<SocketAddr>>>;
}

/// The operating system's resolver (through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: String, port: u16) -> BoxFuture<io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

/// Which destination addresses a media download may reach (canon-wire.md §7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddressPolicy {
    /// Allow private, loopback, link-local, reserved and shared addresses
    /// (`HERMES_ALLOW_PRIVATE_URLS`; the binary reads the variable). The
    /// cloud-metadata floor stays blocked.
    pub allow_private: bool,
    /// Allow loopback addresses only (127.0.0.0/8, ::1) while everything else
    /// private stays blocked: enough for a loopback simulator and for tests.
    pub allow_loopback: bool,
}

/// Why an address or host was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("address {what} is not allowed")]
pub struct BlockedAddress {
    /// The refused host or address.
    pub what: String,
}

/// Host names that are always refused (canon-wire.md §7.2).
const METADATA_HOSTS: [&str; 2] = ["metadata.google.internal", "metadata.goog"];

/// Whether a host name (before resolution) is always refused.
pub fn host_always_blocked(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    METADATA_HOSTS.contains(&host.as_str())
}

fn v4_in(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn v6_in(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// The always-blocked floor for IPv4: cloud metadata addresses and all of
/// 169.254.0.0/16.
fn v4_metadata(ip: Ipv4Addr) -> bool {
    v4_in(ip, [169, 254, 0, 0], 16) || ip == Ipv4Addr::new(100, 100, 100, 200)
}

/// Non-global IPv4: private, loopback, link-local, shared (100.64/10),
/// documentation, benchmarking, multicast, reserved, unspecified, broadcast.
fn v4_private(ip: Ipv4Addr) -> bool {
    const NETS: [([u8; 4], u32); 14] = [
        ([0, 0, 0, 0], 8),
        ([10, 0, 0, 0], 8),
        ([100, 64, 0, 0], 10),
        ([127, 0, 0, 0], 8),
        ([169, 254, 0, 0], 16),
        ([172, 16, 0, 0], 12),
        ([192, 0, 0, 0], 24),
        ([192, 0, 2, 0], 24),
        ([192, 88, 99, 0], 24),
        ([192, 168, 0, 0], 16),
        ([198, 18, 0, 0], 15),
        ([198, 51, 100, 0], 24),
        ([203, 0, 113, 0], 24),
        ([224, 0, 0, 0], 3),
    ];
    NETS.iter().any(|(net, prefix)| v4_in(ip, *net, *prefix))
}

/// Checks one resolved address (canon-wire.md §7.2). IPv4-mapped IPv6 is
/// judged by its embedded IPv4 address.
pub fn check_ip(ip: IpAddr, policy: AddressPolicy) -> Result<(), BlockedAddress> {
    let blocked = || BlockedAddress {
        what: ip.to_string(),
    };
    let v4 = match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(v6) => v6.to_ipv4_mapped(),
    };
    if let Some(v4) = v4 {
        if v4_metadata(v4) {
            return Err(blocked());
        }
        if policy.allow_private || (policy.allow_loopback && v4.is_loopback()) {
            return Ok(());
        }
        return if v4_private(v4) {
            Err(blocked())
        } else {
            Ok(())
        };
    }
    let IpAddr::V6(v6) = ip else {
        return Err(blocked());
    };
    if v6
        == "fd00:ec2::254"
            .parse::<Ipv6Addr>()
            .unwrap_or(Ipv6Addr::UNSPECIFIED)
    {
        return Err(blocked());
    }
    if policy.allow_private || (policy.allow_loopback && v6.is_loopback()) {
        return Ok(());
    }
    // Only global unicast (2000::/3) outside the special blocks may pass; this
    // also refuses IPv4-compatible, NAT64 (64:ff9b::/96) and 6to4 addresses,
    // which embed an IPv4 address that could be internal.
    let global_unicast = v6_in(v6, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);
    let special = [
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23),
        (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32),
        (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16),
    ]
    .iter()
    .any(|(net, prefix)| v6_in(v6, *net, *prefix));
    if global_unicast && !special {
        Ok(())
    } else {
        Err(blocked())
    }
}

/// Marker cause: the TCP connect did not finish within the connect timeout.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("connect timed out")]
pub(crate) struct ConnectTimedOut;

/// The TCP connector (optionally guarded) that hyper-rustls wraps.
#[derive(Clone)]
pub(crate) struct Connector {
    resolver: Arc<dyn Resolver>,
    policy: Option<AddressPolicy>,
    connect_timeout: Duration,
    attempts: Arc<Mutex<VecDeque<SocketAddr>>>,
}

/// Connect attempts remembered for diagnostics: the most recent ones only, so
/// a client that lives for months does not grow without bound.
pub(crate) const MAX_RECORDED_ATTEMPTS: usize = 256;

impl Connector {
    pub(crate) fn new(
        resolver: Arc<dyn Resolver>,
        policy: Option<AddressPolicy>,
        connect_timeout: Duration,
    ) -> Connector {
        Connector {
            resolver,
            policy,
            connect_timeout,
            attempts: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// The most recent [`MAX_RECORDED_ATTEMPTS`] addresses a TCP connect was
    /// attempted to, oldest first.
    pub(crate) fn attempts(&self) -> Vec<SocketAddr> {
        self.attempts
            .lock()
            .map(|a| a.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The host of `uri` without IPv6 brackets.
pub(crate) fn uri_host(uri: &Uri) -> Option<&str> {
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// The port of `uri`, defaulting by scheme.
pub(crate) fn uri_port(uri: &Uri) -> u16 {
    uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    })
}

impl Connector {
    async fn connect(self, uri: Uri) -> Result<TokioIo<TcpStream>, BoxError> {
        let host = uri_host(&uri)
            .ok_or_else(|| BoxError::from("url has no host"))?
            .to_owned();
        let port = uri_port(&uri);
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                if self.policy.is_some() && host_always_blocked(&host) {
                    return Err(Box::new(BlockedAddress { what: host }));
                }
                let lookup = self.resolver.resolve(host.clone(), port);
                match tokio::time::timeout(self.connect_timeout, lookup).await {
                    Ok(Ok(addrs)) => addrs,
                    Ok(Err(err)) if self.policy.is_some() => {
                        // A failed resolution blocks a guarded download.
                        tracing::debug!(error = %err, "media host did not resolve");
                        return Err(Box::new(BlockedAddress { what: host }));
                    }
                    Ok(Err(err)) => return Err(Box::new(err)),
                    Err(_) => return Err(Box::new(ConnectTimedOut)),
                }
            }
        };
        if addrs.is_empty() {
            return Err(match self.policy {
                Some(_) => Box::new(BlockedAddress { what: host }),
                None => "name resolved to no address".into(),
            });
        }
        if let Some(policy) = self.policy {
            for addr in &addrs {
                check_ip(addr.ip(), policy)?;
            }
        }
        let mut last: BoxError = "no address to connect to".into();
        for addr in addrs {
            if let Ok(mut attempts) = self.attempts.lock() {
                if attempts.len() >= MAX_RECORDED_ATTEMPTS {
                    attempts.pop_front();
                }
                attempts.push_back(addr);
            }
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(TokioIo::new(stream));
                }
                Ok(Err(err)) => last = Box::new(err),
                Err(_) => last = Box::new(ConnectTimedOut),
            }
        }
        Err(last)
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<Result<TokioIo<TcpStream>, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(addr: &str, strict: bool, private_allowed: bool) {
        let ip: IpAddr = addr.parse().expect("test address");
        let strict_policy = AddressPolicy::default();
        let lax = AddressPolicy {
            allow_private: true,
            allow_loopback: false,
        };
        assert_eq!(check_ip(ip, strict_policy).is_ok(), strict, "{addr} strict");
        assert_eq!(
            check_ip(ip, lax).is_ok(),
            private_allowed,
            "{addr} private allowed"
        );
    }

    #[test]
    fn metadata_floor_is_always_blocked() {
        for addr in [
            "169.254.169.254",
            "169.254.170.2",
            "169.254.169.253",
            "169.254.1.1",
            "100.100.100.200",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "::ffff:100.100.100.200",
        ] {
            check(addr, false, false);
        }
        assert!(host_always_blocked("Metadata.Google.Internal."));
        assert!(host_always_blocked("metadata.goog"));
        assert!(!host_always_blocked("example.com"));
    }

    #[test]
    fn private_ranges_are_blocked_unless_allowed() {
        for addr in [
            "10.0.0.1",
            "127.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "ff02::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "2001:db8::1",
        ] {
            check(addr, false, true);
        }
    }

    #[test]
    fn public_addresses_pass() {
        for addr in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            check(addr, true, true);
        }
    }

    #[test]
    fn loopback_switch_allows_loopback_only() {
        let policy = AddressPolicy {
            allow_private: false,
            allow_loopback: true,
        };
        assert!(check_ip("127.0.0.1".parse().unwrap(), policy).is_ok());
        assert!(check_ip("::1".parse().unwrap(), policy).is_ok());
        assert!(check_ip("10.0.0.1".parse().unwrap(), policy).is_err());
        assert!(check_ip("169.254.169.254".parse().unwrap(), policy).is_err());
    }
}

#[cfg(test)]
mod attempt_log_tests {
    use super::*;

    #[tokio::test]
    async fn the_attempt_log_keeps_only_the_most_recent_addresses() {
        // A port nobody listens on: every connect is refused at once.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = closed.local_addr().expect("addr").port();
        drop(closed);
        let connector = Connector::new(Arc::new(SystemResolver), None, Duration::from_secs(2));
        let total = MAX_RECORDED_ATTEMPTS + 40;
        for _ in 0..total {
            let uri: Uri = format!("http://127.0.0.1:{port}/").parse().expect("uri");
            assert!(connector.clone().connect(uri).await.is_err());
        }
        let attempts = connector.attempts();
        assert_eq!(attempts.len(), MAX_RECORDED_ATTEMPTS);
        assert!(attempts.iter().all(|a| a.port() == port));
    }
}
