//! Helpers shared by the `serve_*.rs` tests, on top of the fake shim of `shim_support.rs`:
//! requests the shim makes, messages and faults injected into canon-sim, the group
//! conversation, the journal, and a media server that drips.

use canon_sim::control::Injection;
use canon_sim::faults::{FaultAction, FaultMatcher, FaultRule};
use canon_sim::{ConversationSpec, SimHandle, DEFAULT_AGENT, DEFAULT_CONVERSATION, DEFAULT_OWNER};
use serde_json::{json, Value};

use super::shim_support::{ctx, Shim};

/// `adapter.disconnect`, asserting it is answered.
pub(crate) async fn disconnect(shim: &mut Shim) {
    let done = shim
        .request("adapter.disconnect", json!({"adapter_instance": 1}))
        .await;
    assert_eq!(done["ok"], true, "{done}");
}

/// Injects a human message with `text` into the direct conversation.
pub(crate) fn inject_text(sim: &SimHandle, text: &str) {
    sim.inject_message(&Injection {
        text: Some(text.to_owned()),
        ..Injection::default()
    })
    .expect("inject");
}

/// `adapter.send` opening a streamed answer (`expect_edits`) in the direct conversation; the
/// response.
pub(crate) async fn send_streamed(shim: &mut Shim, content: &str) -> Value {
    shim.request(
        "adapter.send",
        json!({"chat_id": DEFAULT_CONVERSATION, "content": content,
               "metadata": {"expect_edits": true}, "ctx": ctx()}),
    )
    .await
}

/// `adapter.chat_info` for `chat_id`; the response.
pub(crate) async fn chat_info(shim: &mut Shim, chat_id: &str) -> Value {
    shim.request("adapter.chat_info", json!({"chat_id": chat_id}))
        .await
}

pub(crate) const GROUP: &str = "c-team";

/// A group conversation `c-team` ("Team") of the owner and the agent.
pub(crate) fn add_group(sim: &SimHandle) {
    sim.create_conversation(ConversationSpec {
        id: Some(GROUP.to_owned()),
        kind: "group".to_owned(),
        name: Some("Team".to_owned()),
        member_ids: vec![DEFAULT_OWNER.to_owned(), DEFAULT_AGENT.to_owned()],
        behavior: None,
    });
}

/// Requests the sim journal recorded under `path`, in order: (method, body).
pub(crate) fn journal(sim: &SimHandle, path: &str) -> Vec<(String, Value)> {
    sim.journal(0, Some(path))
        .into_iter()
        .map(|e| (e.method, e.body))
        .collect()
}

pub(crate) fn status_fault(method: &str, path: &str, status: u16) -> FaultRule {
    FaultRule {
        id: String::new(),
        matcher: FaultMatcher {
            method: Some(method.to_owned()),
            path: Some(path.to_owned()),
            ..FaultMatcher::default()
        },
        action: FaultAction::Status {
            status,
            body: None,
            retry_after: None,
            headers: Vec::new(),
        },
        seen: 0,
        fired: 0,
    }
}

/// Checks that `parts` are exactly one standalone id group carrying `text` in order, and
/// returns its base id.
pub(crate) fn assert_one_group(parts: &[(Option<String>, Value)], text: &str) -> String {
    let count = parts.len();
    assert!(count > 1);
    let texts: Vec<&str> = parts
        .iter()
        .map(|(_, m)| m["text"].as_str().unwrap_or_default())
        .collect();
    assert!(texts.iter().all(|t| t.len() <= 3_800), "{texts:?}");
    assert_eq!(texts.join("\n"), text, "the parts carry the text in order");
    let base = parts[0].1["metadata"]["messageChunk"]["groupId"]
        .as_str()
        .expect("a group id")
        .to_owned();
    assert!(
        base.len() == 45 && base.starts_with("hermes-final-"),
        "{base}"
    );
    for (i, (client_id, message)) in parts.iter().enumerate() {
        let index = i + 1;
        let metadata = &message["metadata"];
        assert_eq!(
            client_id.as_deref(),
            Some(format!("{base}-part-{index}").as_str())
        );
        assert_eq!(
            metadata["messageChunk"],
            json!({"type": "text", "index": index, "count": count, "groupId": base}),
            "{metadata}"
        );
        assert!(metadata.get("turnId").is_none(), "no turn: {metadata}");
        if index < count {
            assert_eq!(metadata["turnSemantics"], "progress", "{metadata}");
            assert_eq!(metadata["replyBehavior"], "suppress_auto_reply");
        } else {
            assert_eq!(metadata["turnSemantics"], "turn_complete", "{metadata}");
            assert_eq!(metadata["turnComplete"], true);
        }
    }
    base
}

/// A real HTTP server that answers every request with a 200 header announcing 100,000 bytes of
/// PNG, then drips the body one byte every `every`, each byte well inside the transport's 30 s
/// read timeout, until the client hangs up. Returns the URL of its one file.
pub(crate) async fn slow_drip_server(every: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match socket.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let header = "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\n\
                              content-length: 100000\r\n\r\n";
                if socket.write_all(header.as_bytes()).await.is_err() {
                    return;
                }
                for &b in b"\x89PNG\r\n\x1a\n".iter().cycle() {
                    tokio::time::sleep(every).await;
                    if socket.write_all(&[b]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}/slow.png")
}
