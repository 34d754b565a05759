//! Golden round-trip tests of every protocol type (fixtures under
//! `fixtures/stdio/`: `shim.jsonl` holds what the shim sends and the
//! daemon's responses to it, `daemon.jsonl` the other direction), plus
//! envelope, error, redaction and handshake cases.
//!
//! Each fixture line is decoded into its typed message and encoded again;
//! the bytes must be identical, so a change of field names, order,
//! optionality or spelling breaks a test.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;

fn fixture(name: &str) -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/stdio")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(str::to_owned).collect()
}

/// Decodes a body into its typed message and returns its type and body
/// encoded again.
type Recode = fn(&str, Value) -> Result<(String, Value), ProtocolError>;

/// Which typed enums decode each frame kind of one direction.
struct Direction {
    request: Recode,
    notification: Recode,
    response: Recode,
}

macro_rules! via {
    ($name:ident) => {
        |kind: &str, body: Value| {
            $name::from_parts(kind, body).map(|m| (m.type_name().to_owned(), m.to_body()))
        }
    };
}

/// Round-trips every line; returns the types seen per frame kind.
fn round_trip(name: &str, direction: &Direction) -> [BTreeSet<String>; 3] {
    let mut seen: [BTreeSet<String>; 3] = Default::default();
    let lines = fixture(name);
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "{name} must be sorted");
    for line in lines {
        let frame = decode_frame(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        let again = match frame {
            Frame::Request { id, kind, body } => {
                let (kind, body) =
                    (direction.request)(&kind, body).unwrap_or_else(|e| panic!("{line}: {e}"));
                seen[0].insert(kind.clone());
                encode_request(&id, &kind, body)
            }
            Frame::Notification { kind, body } => {
                let (kind, body) =
                    (direction.notification)(&kind, body).unwrap_or_else(|e| panic!("{line}: {e}"));
                seen[1].insert(kind.clone());
                encode_notification(&kind, body)
            }
            Frame::Response { id, re, result } => {
                let re = re.unwrap_or_default();
                match result {
                    Ok(body) => {
                        let (kind, body) = (direction.response)(&re, body)
                            .unwrap_or_else(|e| panic!("{line}: {e}"));
                        seen[2].insert(kind);
                        encode_response(&id, &re, Ok(body))
                    }
                    Err(error) => encode_response(&id, &re, Err(&error)),
                }
            }
        };
        assert_eq!(again, line);
    }
    seen
}

fn all(types: &[&str]) -> BTreeSet<String> {
    types.iter().map(|t| (*t).to_owned()).collect()
}

#[test]
fn every_shim_frame_round_trips() {
    let direction = Direction {
        request: via!(ShimRequest),
        notification: via!(ShimNotification),
        response: via!(ShimResponse),
    };
    let [requests, notifications, responses] = round_trip("shim.jsonl", &direction);
    assert_eq!(requests, all(ShimRequest::TYPES));
    assert_eq!(notifications, all(ShimNotification::TYPES));
    assert_eq!(responses, all(ShimResponse::TYPES));
}

#[test]
fn every_daemon_frame_round_trips() {
    let direction = Direction {
        request: via!(DaemonRequest),
        notification: via!(DaemonNotification),
        response: via!(DaemonResponse),
    };
    let [requests, notifications, responses] = round_trip("daemon.jsonl", &direction);
    assert_eq!(requests, all(DaemonRequest::TYPES));
    assert_eq!(notifications, all(DaemonNotification::TYPES));
    assert_eq!(responses, all(DaemonResponse::TYPES));
}

#[test]
fn request_and_response_types_pair_up() {
    assert_eq!(ShimRequest::TYPES, ShimResponse::TYPES);
    assert_eq!(DaemonRequest::TYPES, DaemonResponse::TYPES);
}

/// One case of the envelope table: a line and the expected result.
fn check_decode(line: &str, expected: Result<Frame, ProtocolError>) {
    assert_eq!(decode_frame(line.as_bytes()), expected, "{line}");
}

#[test]
fn envelope_classification_and_errors() {
    check_decode(
        r#"{"v":1,"type":"shutdown","id":"s:9"}"#,
        Ok(Frame::Request {
            id: "s:9".into(),
            kind: "shutdown".into(),
            body: json!({}),
        }),
    );
    check_decode(
        "{\"v\":1,\"type\":\"typing.pause\",\"body\":{\"chat_id\":\"c\"}}\n",
        Ok(Frame::Notification {
            kind: "typing.pause".into(),
            body: json!({"chat_id": "c"}),
        }),
    );
    check_decode(
        r#"{"v":1,"id":"s:1","ok":false}"#,
        Ok(Frame::Response {
            id: "s:1".into(),
            re: None,
            result: Err(ErrorBody {
                code: ErrorCode::Internal,
                message: String::new(),
                retryable: false,
            }),
        }),
    );
    check_decode(
        r#"{"v":2,"type":"x"}"#,
        Err(ProtocolError::UnsupportedVersion { v: 2 }),
    );
    check_decode(r#"{"type":"x"}"#, Err(ProtocolError::NotAFrame));
    check_decode(r#"{"v":1,"id":"s:1"}"#, Err(ProtocolError::NotAFrame));
    check_decode("[1,2]", Err(ProtocolError::NotAnObject));
    check_decode(
        "{\"v\":1,\"type\":\"a\"\n,",
        Err(ProtocolError::NotAnObject),
    );
    let huge = vec![b' '; MAX_FRAME_BYTES + 1];
    assert_eq!(
        decode_frame(&huge),
        Err(ProtocolError::FrameTooLarge {
            len: MAX_FRAME_BYTES + 1
        })
    );
}

#[test]
fn unknown_types_and_bad_bodies_map_to_error_codes() {
    let unknown = ShimRequest::from_parts("adapter.teleport", json!({})).unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::UnknownType);
    let missing = ShimRequest::from_parts("turn.start", json!({"event_ref": "e"})).unwrap_err();
    assert_eq!(missing.code(), ErrorCode::BadRequest);
    assert!(
        missing.to_string().contains("missing field `session_key`"),
        "{missing}"
    );
    // A wrongly typed secret is reported without quoting its value.
    let bad = ShimRequest::from_parts(
        "probe",
        json!({"config": {"api_key": 12345678901_u64, "extra": {}}, "verify": "sk-live-leak"}),
    )
    .unwrap_err();
    assert!(!bad.to_string().contains("sk-live-leak"), "{bad}");
    // Unknown body fields are ignored.
    let extra = ShimRequest::from_parts("shutdown", json!({"reason": "x", "later": 1}));
    assert!(matches!(extra, Ok(ShimRequest::Shutdown(Shutdown { ref reason })) if reason == "x"));
}

#[test]
fn debug_output_redacts_secrets() {
    let raw = [fixture("shim.jsonl"), fixture("daemon.jsonl")]
        .concat()
        .join("\n");
    for secret in [
        "ck_secret_0123456789",
        "already answered",
        "looks fine",
        "rm -rf build",
    ] {
        assert!(raw.contains(secret), "the fixtures must carry {secret}");
    }
    for line in fixture("shim.jsonl")
        .iter()
        .chain(fixture("daemon.jsonl").iter())
    {
        let Ok(frame) = decode_frame(line.as_bytes()) else {
            continue;
        };
        let shown = match frame {
            Frame::Request { kind, body, .. } => format!(
                "{:?} {:?}",
                ShimRequest::from_parts(&kind, body.clone()),
                DaemonRequest::from_parts(&kind, body)
            ),
            _ => continue,
        };
        for secret in [
            "ck_secret_0123456789",
            "already answered",
            "looks fine",
            "rm -rf build",
        ] {
            assert!(!shown.contains(secret), "{secret} leaked: {shown}");
        }
    }
}

fn hello() -> Hello {
    Hello {
        protocols: vec![1],
        manifest_sha256: "m".into(),
        shim_version: "0.1.0".into(),
        binary_version: "0.1.0".into(),
        hermes_version: "0.19.0".into(),
        python_version: "3.11.7".into(),
        pid: 1,
        hermes_home: "/h".into(),
        profile_name: None,
        multiplex_active: false,
        seams: Seams::default(),
    }
}

const POLICY: HandshakePolicy<'static> = HandshakePolicy {
    daemon_version: "0.1.0",
    manifest_sha256: "m",
    audited_hermes: "0.19.0",
    audited_python: "3.11",
};

fn check_handshake(edit: fn(&mut Hello), expected: Result<(), (ErrorCode, &str)>) {
    let mut h = hello();
    edit(&mut h);
    let got = negotiate(&h, &POLICY, "0123456789abcdef");
    match expected {
        Ok(()) => {
            let ok = got.unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(ok.protocol, 1);
            assert_eq!(ok.limits.max_frame_bytes, 8_388_608);
            assert_eq!(ok.epoch, "0123456789abcdef");
        }
        Err((code, message)) => {
            let error = got.expect_err("handshake should fail");
            assert_eq!(error.code, code);
            assert_eq!(error.message, message);
        }
    }
}

#[test]
fn handshake_rules() {
    check_handshake(|_| {}, Ok(()));
    check_handshake(|h| h.python_version = "3.11".into(), Ok(()));
    check_handshake(
        |h| h.protocols = vec![2, 3],
        Err((
            ErrorCode::UnsupportedProtocol,
            "no common protocol; the daemon speaks 1",
        )),
    );
    check_handshake(
        |h| h.binary_version = "0.0.9".into(),
        Err((ErrorCode::StaleShim, STALE_SHIM_MESSAGE)),
    );
    check_handshake(
        |h| h.manifest_sha256 = "other".into(),
        Err((ErrorCode::StaleShim, STALE_SHIM_MESSAGE)),
    );
    check_handshake(
        |h| h.python_version = "3.12.1".into(),
        Err((
            ErrorCode::UnsupportedHost,
            "Canon requires hermes-agent 0.19.0 on Python 3.11; found 0.19.0 on 3.12.1",
        )),
    );
    check_handshake(
        |h| h.python_version = "3.111".into(),
        Err((
            ErrorCode::UnsupportedHost,
            "Canon requires hermes-agent 0.19.0 on Python 3.11; found 0.19.0 on 3.111",
        )),
    );
    check_handshake(
        |h| h.multiplex_active = true,
        Err((ErrorCode::UnsupportedHost, MULTIPLEX_MESSAGE)),
    );
}

proptest::proptest! {
    /// Decoding never panics, whatever the bytes.
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
        let _ = decode_frame(&bytes);
    }

    /// Any JSON body decodes to a message or a typed error, never a panic.
    #[test]
    fn typed_decoding_never_panics(kind in 0usize..64, body in proptest::prelude::any::<u8>()) {
        let bodies = [json!({}), json!(null), json!([body]), json!({"chat_id": body}), json!("x")];
        // Every request type, however many the protocol grows to.
        let kind = ShimRequest::TYPES[kind % ShimRequest::TYPES.len()];
        for body in bodies {
            let _ = ShimRequest::from_parts(kind, body.clone());
            let _ = ShimResponse::from_parts(kind, body);
        }
    }
}
