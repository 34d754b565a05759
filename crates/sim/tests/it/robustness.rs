//! Never panic on outside input: arbitrary methods, paths, headers and JSON bodies through the
//! REST handlers (proptest, no sockets).

use canon_sim::api::handle;
use canon_sim::http::ApiRequest;
use canon_sim::{SimConfig, State};
use proptest::prelude::*;
use serde_json::{json, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just("c-direct".to_owned()),
            Just("h-owner".to_owned()),
            Just("a-hermes".to_owned()),
            ".{0,12}"
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("conversationId".to_owned()),
                    Just("text".to_owned()),
                    Just("messageId".to_owned()),
                    Just("metadata".to_owned()),
                    Just("attachments".to_owned()),
                    Just("interactionKind".to_owned()),
                    Just("inputId".to_owned()),
                    Just("approvalId".to_owned()),
                    Just("cardId".to_owned()),
                    Just("expiresAt".to_owned()),
                    Just("kind".to_owned()),
                    Just("card".to_owned()),
                    Just("wire".to_owned()),
                    Just("verb".to_owned()),
                    Just("envelope".to_owned()),
                    Just("body".to_owned()),
                    Just("value".to_owned()),
                    Just("encoding".to_owned()),
                    Just("state".to_owned()),
                    Just("queueDepth".to_owned()),
                    Just("streaming".to_owned()),
                    Just("status".to_owned()),
                    Just("data".to_owned()),
                    Just("mimeType".to_owned()),
                    Just("replyAuthority".to_owned()),
                    "[a-zA-Z]{1,8}"
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const PATHS: [&str; 20] = [
    "/healthz/",
    "/agents/register",
    "/agents/status/reg-000001",
    "/agents/me",
    "/conversations",
    "/messages/send",
    "/media/upload",
    "/typing",
    "/streaming",
    "/runtime/turn",
    "/runtime/status",
    "/runtime/signal/consume",
    "/conversations/c-direct/messages/m-000001/disposition",
    "/conversations/c-direct/read",
    "/runtime-interaction/request",
    "/runtime-interaction/consume",
    "/agent/verbs/send_to",
    "/agent/verbs/no_reply",
    "/agents/discover",
    "/files/a/b/c",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn handlers_never_panic(
        method in prop_oneof![Just("GET"), Just("POST"), Just("PATCH")],
        path in prop::sample::select(&PATHS[..]),
        body in json_value(),
        authenticated in any::<bool>(),
        raw_bytes in prop::option::of(prop::collection::vec(any::<u8>(), 0..32)),
        query in "[a-z=&%0-9]{0,16}",
    ) {
        let mut state = State::new(SimConfig::for_tests(), "http://127.0.0.1:1".to_owned());
        let key = state.key_of("a-hermes").unwrap_or_default();
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if authenticated {
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        let body = raw_bytes.unwrap_or_else(|| body.to_string().into_bytes());
        let req = ApiRequest { method: method.to_owned(), path: path.to_owned(), query, headers, body };
        // Twice: the second call exercises idempotency and single-use paths.
        for _ in 0..2 {
            if let Some(reply) = handle(&mut state, &req) {
                prop_assert!((200..600).contains(&reply.status));
            }
        }
    }
}

#[test]
fn deeply_nested_but_small_metadata_is_served() {
    let mut state = State::new(SimConfig::for_tests(), "http://127.0.0.1:1".to_owned());
    let key = state.key_of("a-hermes").unwrap();
    let mut nested = json!(1);
    for _ in 0..100 {
        nested = json!([nested]);
    }
    let req = ApiRequest {
        method: "POST".into(),
        path: "/messages/send".into(),
        query: String::new(),
        headers: vec![("authorization".into(), format!("Bearer {key}"))],
        body: json!({"conversationId": "c-direct", "text": "x", "metadata": {"deep": nested}})
            .to_string()
            .into_bytes(),
    };
    let reply = handle(&mut state, &req).expect("served");
    assert_eq!(reply.status, 200, "deep but small metadata is accepted");
}
