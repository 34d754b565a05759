//! SSRF-guarded media download tests (canon-wire.md §7.2). Only loopback is
//! ever connected to: refused targets must show up as zero connection attempts.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use canon_transport::media::{MediaDownloader, MediaOptions, MEDIA_USER_AGENT};
use canon_transport::net::AddressPolicy;
use canon_transport::TransportError;
use canon_wire::FailureKind;
use tokio::io::AsyncWriteExt;

use crate::support::{MapResolver, RawServer, SharedResolver};

const TEN_MIB: usize = 10 * 1024 * 1024;

fn loopback_only(resolver: Arc<MapResolver>) -> MediaDownloader {
    MediaDownloader::new(MediaOptions {
        policy: AddressPolicy {
            allow_private: false,
            allow_loopback: true,
        },
        resolver: Arc::new(SharedResolver(resolver)),
        ..MediaOptions::default()
    })
}

fn resolver_with(entries: &[(&str, &str)]) -> Arc<MapResolver> {
    let mut table: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for (host, ip) in entries {
        table
            .entry((*host).to_owned())
            .or_default()
            .push(ip.parse().unwrap());
    }
    Arc::new(MapResolver {
        table,
        ..MapResolver::default()
    })
}

/// A server whose every connection answers with a redirect to `location`.
async fn redirecting_to(location: &'static str) -> RawServer {
    RawServer::start(move |_, mut socket| {
        Box::pin(async move {
            let reply =
                format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n");
            let _ = socket.write_all(reply.as_bytes()).await;
        })
    })
    .await
}

fn assert_blocked(err: &TransportError, redirect: bool) {
    match err {
        TransportError::Blocked { redirect: r, .. } => assert_eq!(*r, redirect, "{err}"),
        other => panic!("expected Blocked, got {other:?}"),
    }
}

#[tokio::test]
async fn redirect_to_metadata_address_is_refused_without_connecting() {
    let server = redirecting_to("http://169.254.169.254/latest/meta-data/iam?x=1").await;
    let downloader = loopback_only(resolver_with(&[]));
    let err = downloader
        .download(&format!("{}/a.png", server.url()))
        .await
        .unwrap_err();
    assert_blocked(&err, true);
    assert_eq!(
        err.to_string(),
        "Blocked redirect to private/internal address: http://169.254.169.254/.../iam"
    );
    assert_eq!(
        downloader.connect_attempts(),
        vec![server.addr],
        "only the loopback server was contacted"
    );
    assert_eq!(err.kind(), FailureKind::Blocked);
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn redirect_to_private_address_is_refused_without_connecting() {
    let server = redirecting_to("http://10.0.0.1/internal").await;
    let downloader = loopback_only(resolver_with(&[]));
    let err = downloader
        .download(&format!("{}/a.png", server.url()))
        .await
        .unwrap_err();
    assert_blocked(&err, true);
    assert_eq!(downloader.connect_attempts(), vec![server.addr]);
}

#[tokio::test]
async fn redirect_to_a_name_resolving_inside_is_refused_after_resolution() {
    let server = redirecting_to("http://internal.example/x").await;
    let resolver = resolver_with(&[
        ("internal.example", "8.8.8.8"),
        ("internal.example", "10.0.0.1"),
    ]);
    let downloader = loopback_only(resolver.clone());
    let err = downloader
        .download(&format!("{}/a", server.url()))
        .await
        .unwrap_err();
    assert_blocked(&err, true);
    assert_eq!(*resolver.lookups.lock().unwrap(), ["internal.example"]);
    assert_eq!(
        downloader.connect_attempts(),
        vec![server.addr],
        "no address of a mixed answer is contacted"
    );
}

#[tokio::test]
async fn unsafe_first_urls_are_refused_before_anything_happens() {
    let resolver = resolver_with(&[]);
    let downloader = loopback_only(resolver.clone());
    for url in [
        "http://169.254.169.254/latest",
        "http://[fd00:ec2::254]/x",
        "http://[::ffff:169.254.169.254]/x",
        "http://100.100.100.200/x",
        "http://10.0.0.1/x",
        "http://metadata.google.internal/computeMetadata/v1/",
        "file:///etc/passwd",
        "ftp://127.0.0.1/x",
        "http:///nohost",
        "http://unresolvable.example/x",
    ] {
        let err = downloader.download(url).await.unwrap_err();
        assert_blocked(&err, false);
        assert!(
            err.to_string()
                .starts_with("Blocked unsafe URL (SSRF protection): "),
            "{err}"
        );
    }
    assert!(downloader.connect_attempts().is_empty());
    assert_eq!(
        *resolver.lookups.lock().unwrap(),
        ["unresolvable.example"],
        "metadata names are never resolved"
    );
}

#[tokio::test]
async fn loopback_is_refused_unless_allowed() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
        })
    })
    .await;
    let strict = MediaDownloader::new(MediaOptions::default());
    let err = strict
        .download(&format!("{}/x", server.url()))
        .await
        .unwrap_err();
    assert_blocked(&err, false);
    assert!(strict.connect_attempts().is_empty());
    assert!(server.heads().is_empty());
    let private = MediaDownloader::new(MediaOptions {
        policy: AddressPolicy {
            allow_private: true,
            allow_loopback: false,
        },
        ..MediaOptions::default()
    });
    assert_eq!(
        &private
            .download(&format!("{}/x", server.url()))
            .await
            .unwrap()
            .bytes[..],
        b"ok"
    );
    // The metadata floor holds even when private addresses are allowed.
    assert_blocked(
        &private
            .download("http://169.254.169.254/")
            .await
            .unwrap_err(),
        false,
    );
}

#[tokio::test]
async fn follows_loopback_redirects_sends_no_credentials_and_reads_the_type() {
    let server = RawServer::start(|n, mut socket| {
        Box::pin(async move {
            let reply: &[u8] = match n {
                0 => b"HTTP/1.1 301 Moved\r\nlocation: /files/b\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                1 => b"HTTP/1.1 307 Temp\r\nlocation: c.png?token=t\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                _ => b"HTTP/1.1 200 OK\r\ncontent-type: Image/PNG; charset=binary\r\ncontent-length: 4\r\nconnection: close\r\n\r\nPNG!",
            };
            let _ = socket.write_all(reply).await;
        })
    })
    .await;
    let downloader = loopback_only(resolver_with(&[]));
    let media = downloader
        .download(&format!("{}/start", server.url()))
        .await
        .unwrap();
    assert_eq!(&media.bytes[..], b"PNG!");
    assert_eq!(media.content_type.as_deref(), Some("image/png"));
    assert_eq!(
        media.final_url,
        format!("{}/files/c.png?token=t", server.url())
    );
    let heads = server.heads();
    assert_eq!(heads.len(), 3);
    for head in &heads {
        assert!(
            head.contains(&format!("user-agent: {MEDIA_USER_AGENT}\r\n")),
            "{head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }
}

#[tokio::test]
async fn redirect_loops_stop_after_five_hops() {
    let server = redirecting_to("/again").await;
    let downloader = loopback_only(resolver_with(&[]));
    let err = downloader
        .download(&format!("{}/x", server.url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), FailureKind::Protocol);
    assert_eq!(
        server.heads().len(),
        6,
        "the first request plus five redirects"
    );
}

/// A server that sends `len` body bytes, with or without `Content-Length`.
async fn body_server(len: usize, declare: bool) -> RawServer {
    RawServer::start(move |_, mut socket| {
        Box::pin(async move {
            let head = if declare {
                format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n")
            } else {
                "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_owned()
            };
            if socket.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'z'; 64 * 1024];
            let mut left = len;
            while left > 0 {
                let n = left.min(chunk.len());
                if socket.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
                left -= n;
            }
            let _ = socket.shutdown().await;
        })
    })
    .await
}

#[tokio::test]
async fn ten_mib_cap_with_and_without_content_length() {
    let downloader = loopback_only(resolver_with(&[]));
    for declare in [true, false] {
        let exact = body_server(TEN_MIB, declare).await;
        let media = downloader
            .download(&format!("{}/ok", exact.url()))
            .await
            .unwrap();
        assert_eq!(media.bytes.len(), TEN_MIB, "declare={declare}");
        let over = body_server(TEN_MIB + 1, declare).await;
        let err = downloader
            .download(&format!("{}/big", over.url()))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Canon media attachment exceeds 10MB",
            "declare={declare}"
        );
        assert_eq!(err.kind(), FailureKind::TooLarge);
    }
}

#[tokio::test]
async fn http_errors_surface_with_their_status() {
    let server = RawServer::start(|_, mut socket| {
        Box::pin(async move {
            let _ = socket
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\ngone")
                .await;
        })
    })
    .await;
    let err = loopback_only(resolver_with(&[]))
        .download(&format!("{}/x", server.url()))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(404));
}
