//! The shim's `_constants.py` against the Rust constants it mirrors. A Python run imports the
//! module on its own (no Hermes needed) and prints every constant; each must equal its Rust
//! counterpart, and every constant the module defines must be checked here, so a change on
//! either side alone fails.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use canon_adapter::config;
use canon_chunking::limits;
use canon_host::api;
use canon_host::protocol::{self, ErrorCode, HandshakePolicy, Hello, ShimRequest, TurnContext};
use canon_host::turn;
use serde_json::{json, Map, Value};

use super::gateway_support::{shim_source, workspace_root};

/// The venv's Python when the venv exists (`HERMES_VENV`, else `.cache/hermes-venv`), else the
/// system `python3`: these checks need no Hermes.
pub(crate) fn python() -> PathBuf {
    let venv = std::env::var_os("HERMES_VENV").map_or_else(
        || workspace_root().join(".cache/hermes-venv"),
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    if python.is_file() {
        python
    } else {
        PathBuf::from("python3")
    }
}

/// Runs Python with `args` (no bytecode written); returns stdout, fails with its stderr.
pub(crate) fn run_python<S: AsRef<OsStr>>(args: &[S]) -> String {
    let out = Command::new(python())
        .arg("-B")
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Every upper-case name of `_constants.py` with its value as JSON.
fn shim_constants() -> Map<String, Value> {
    let script = "import json, sys\n\
                  sys.path.insert(0, sys.argv[1])\n\
                  import _constants\n\
                  print(json.dumps({k: v for k, v in vars(_constants).items() if k.isupper()}))\n";
    let dir = shim_source();
    let out = run_python(&[OsStr::new("-c"), OsStr::new(script), dir.as_os_str()]);
    match serde_json::from_str(&out) {
        Ok(Value::Object(map)) => map,
        other => panic!("{other:?}: {out}"),
    }
}

fn seconds(value: &Value) -> Duration {
    Duration::from_secs_f64(
        value
            .as_f64()
            .unwrap_or_else(|| panic!("{value} is no number")),
    )
}

/// Request types the shim sends without a timeout of its own: `turn.accepted` goes out at the
/// runner's dequeue and is never waited for; `tool.call` waits as long as the manifest's entry
/// for the tool says (`timeout_s`, from `canon_host::tools::manifest_tools`).
const UNTIMED: [&str; 2] = ["turn.accepted", "tool.call"];

#[test]
fn shim_constants_equal_the_rust_constants() {
    let shim = shim_constants();
    let get = |name: &str| {
        shim.get(name)
            .unwrap_or_else(|| panic!("_constants.py has no {name}"))
    };
    // Plain values, each against the Rust constant it mirrors.
    let plain = [
        ("PROTOCOL", json!(protocol::PROTOCOL_VERSION)),
        ("AUDITED_HERMES", json!(protocol::AUDITED_HERMES)),
        ("AUDITED_PYTHON", json!(protocol::AUDITED_PYTHON)),
        ("MULTIPLEX_MESSAGE", json!(protocol::MULTIPLEX_MESSAGE)),
        ("PLATFORM", json!(protocol::PLATFORM)),
        ("CONTROL_ID_PREFIX", json!(turn::CONTROL_EVENT_PREFIX)),
        (
            "STANDALONE_ERROR_PREFIX",
            json!(turn::STANDALONE_ERROR_PREFIX),
        ),
        ("MAX_MESSAGE_LENGTH", json!(limits::HOST_MAX_MESSAGE_LENGTH)),
        (
            "STREAMING_OVERFLOW_LIMIT",
            json!(limits::STREAMED_ANSWER_MAX_BYTES),
        ),
        (
            "SESSION_CONTEXT_UNAVAILABLE",
            json!(api::SESSION_CONTEXT_UNAVAILABLE),
        ),
        ("NO_CANON_CONVERSATION", json!(api::NO_CANON_CONVERSATION)),
        ("NO_TRUSTED_HUMAN", json!(api::NO_TRUSTED_HUMAN)),
        ("NO_MESSAGE_PROVENANCE", json!(api::NO_MESSAGE_PROVENANCE)),
    ];
    for (name, rust) in &plain {
        assert_eq!(get(name), rust, "{name}");
    }
    let mut checked: Vec<&str> = plain.iter().map(|(name, _)| *name).collect();

    // The reason-less standalone error is the prefix without its separator.
    let failed = get("STANDALONE_FAILED").as_str().expect("a string");
    assert_eq!(format!("{failed}: "), turn::STANDALONE_ERROR_PREFIX);

    // The host refusal, filled as the shim fills it, is what the daemon's handshake answers.
    let found = ("0.18.2", "3.12.1");
    let hello: Hello = serde_json::from_value(json!({
        "protocols": [protocol::PROTOCOL_VERSION], "manifest_sha256": "m", "shim_version": "v",
        "binary_version": "v", "hermes_version": found.0, "python_version": found.1, "pid": 1,
        "hermes_home": "/h",
    }))
    .expect("a hello");
    let policy = HandshakePolicy {
        daemon_version: "v",
        manifest_sha256: "m",
        audited_hermes: protocol::AUDITED_HERMES,
        audited_python: protocol::AUDITED_PYTHON,
    };
    let refused = protocol::negotiate(&hello, &policy, "0123456789abcdef").expect_err("refused");
    assert_eq!(refused.code, ErrorCode::UnsupportedHost);
    let shim_refusal = [
        protocol::AUDITED_HERMES,
        protocol::AUDITED_PYTHON,
        found.0,
        found.1,
    ]
    .iter()
    .fold(
        get("HOST_REFUSAL").as_str().expect("a string").to_owned(),
        |text, arg| text.replacen("%s", arg, 1),
    );
    assert_eq!(shim_refusal, refused.message);

    // The turn context's fields, in the daemon's order.
    let ctx = serde_json::to_value(TurnContext::default()).expect("a turn context");
    let fields: Vec<&str> = ctx
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    let shim_fields: Vec<&str> = get("CTX_VARS")
        .as_array()
        .expect("a tuple")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(shim_fields, fields);
    let renamed = get("CTX_ENV").as_object().expect("a dict").clone();
    for name in renamed.keys() {
        assert!(shim_fields.contains(&name.as_str()), "CTX_ENV names {name}");
    }

    // Per-request timeouts: the shim's table is the Rust table less the untimed requests, and
    // the Rust table covers every request type but `tool.call`.
    let rust: Vec<(&str, Duration)> = protocol::SHIM_TIMEOUTS.to_vec();
    let mut types: Vec<&str> = rust.iter().map(|(kind, _)| *kind).collect();
    types.push("tool.call");
    types.sort_unstable();
    let mut all = ShimRequest::TYPES.to_vec();
    all.sort_unstable();
    assert_eq!(
        types, all,
        "SHIM_TIMEOUTS names every request type but tool.call"
    );
    let timeouts = get("TIMEOUTS").as_object().expect("a dict");
    let expected: BTreeMap<&str, Duration> = rust
        .iter()
        .copied()
        .filter(|(kind, _)| !UNTIMED.contains(kind))
        .collect();
    let actual: BTreeMap<&str, Duration> = timeouts
        .iter()
        .map(|(kind, secs)| (kind.as_str(), seconds(secs)))
        .collect();
    assert_eq!(actual, expected);
    let timeout = |kind: &str| seconds(&timeouts[kind]);
    // The daemon's own budgets fit inside the shim's waits.
    assert!(config::PROBE_VERIFY_BUDGET < timeout("probe"));
    assert!(config::HITL_CREATE_BUDGET < timeout("adapter.send_clarify"));
    assert!(config::HITL_CREATE_BUDGET < timeout("adapter.send_exec_approval"));
    // The daemon's exit grace ends before the shim's SIGTERM, which would cut a final
    // still retrying.
    assert!(config::EXIT_GRACE < seconds(get("EXIT_WAIT")));
    checked.extend([
        "STANDALONE_FAILED",
        "HOST_REFUSAL",
        "CTX_VARS",
        "CTX_ENV",
        "TIMEOUTS",
        "EXIT_WAIT",
    ]);

    // The error codes the shim sets are codes the daemon knows.
    let codes = [
        ("BACKPRESSURE", ErrorCode::Backpressure),
        ("TIMEOUT", ErrorCode::Timeout),
        ("DAEMON_EXITED", ErrorCode::DaemonExited),
        ("NOT_CONNECTED", ErrorCode::NotConnected),
        ("UNKNOWN_TYPE", ErrorCode::UnknownType),
        ("INTERNAL", ErrorCode::Internal),
    ];
    for (name, code) in codes {
        let parsed: ErrorCode = serde_json::from_value(get(name).clone()).expect("an error code");
        assert_eq!(parsed, code, "{name}");
        checked.push(name);
    }

    let mut defined: Vec<&str> = shim.keys().map(String::as_str).collect();
    defined.sort_unstable();
    checked.sort_unstable();
    assert_eq!(
        defined, checked,
        "every constant of _constants.py is checked here"
    );
}

/// Every turn-context variable the shim reads is one the audited Hermes sets
/// (`gateway.session_context`): a wrong name reads as "no session" and sends land by chat id.
/// Needs the Hermes venv.
#[test]
fn the_turn_context_variables_are_the_ones_hermes_sets() {
    let hermes = super::gateway_support::hermes_bin();
    let python = hermes.with_file_name("python");
    let script = "import json, sys\n\
                  sys.path.insert(0, sys.argv[1])\n\
                  import _constants\n\
                  from gateway import session_context\n\
                  names = [_constants.CTX_ENV.get(n, 'HERMES_SESSION_' + n.upper()) for n in _constants.CTX_VARS]\n\
                  print(json.dumps([n for n in names if n not in session_context._VAR_MAP]))\n";
    let dir = shim_source();
    let out = Command::new(python)
        .arg("-B")
        .args([OsStr::new("-c"), OsStr::new(script), dir.as_os_str()])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unknown: Vec<String> = serde_json::from_slice(&out.stdout).expect("a JSON list");
    assert_eq!(unknown, Vec::<String>::new(), "names Hermes does not set");
}
