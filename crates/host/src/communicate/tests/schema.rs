//! The JSON Schema of `canon_communicate` (runtime-control.md §5.2) and properties of the
//! validator against it: it never panics, every argument object the schema allows passes the
//! code checks of runtime-control.md §5.3, and any Canon result maps to an envelope.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use super::map;
use super::results::{direct_args, message_args};
use crate::communicate::*;

#[test]
fn the_schema_has_one_closed_branch_per_action() {
    let schema = communicate_schema();
    assert_eq!(schema["name"], COMMUNICATE_TOOL);
    let description = schema["description"].as_str().unwrap_or_default();
    assert!(
        description.starts_with("Find discoverable agents or communicate in Canon."),
        "{description}"
    );
    let branches = schema["parameters"]["oneOf"].as_array().expect("oneOf");
    let actions: Vec<&str> = branches
        .iter()
        .map(|b| b["properties"]["action"]["const"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        actions,
        [
            "discover_agents",
            "message_existing",
            "start_direct",
            "create_group",
            "forward_message",
            "share_contact",
            "manage_group_members"
        ]
    );
    for branch in branches {
        assert_eq!(branch["additionalProperties"], false, "{branch}");
        assert!(branch["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("action"))));
    }
    // The schema refuses what the code refuses for blankness, so the two never disagree there.
    assert!(validator()
        .is_valid(&json!({"action": "message_existing", "conversationId": "c", "text": "hi"})));
    let python_spaces = (0..=0x3000u32)
        .filter_map(char::from_u32)
        .filter(|c| crate::media::is_py_space(*c));
    for blank in python_spaces {
        let blank = format!("{blank}{blank}");
        let args = json!({"action": "message_existing", "conversationId": blank, "text": "hi"});
        assert!(!validator().is_valid(&args), "{args}");
        assert_eq!(
            validate(&args).map(|_| ()),
            Err("communicate.conversationId is required".to_owned())
        );
    }
    assert!(
        !validator().is_valid(&json!({"action": "message_existing", "conversationId": "c",
                                          "text": "hi", "extra": 1}))
    );
}

fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(&communicate_schema()["parameters"]).expect("the schema compiles")
    })
}

/// A non-blank string of 1..=`max` code points, some of them multi-byte, spaces inside.
fn filled_string(max: usize) -> impl Strategy<Value = String> {
    let max = max.max(1);
    (
        prop::sample::select(vec!['a', 'Z', '7', 'é', '中', '😀', '_', ':']),
        prop::collection::vec(
            prop::sample::select(vec![
                'b', ' ', 'ü', '字', '🙂', '-', '.', '\u{3000}', '\u{1c}', '\u{a0}',
            ]),
            0..max,
        ),
        any::<bool>(),
    )
        .prop_map(move |(first, rest, lead_space)| {
            let mut s = String::new();
            if lead_space && rest.len() > 1 {
                s.push(' ');
            }
            s.push(first);
            s.extend(rest);
            s.chars().take(max).collect()
        })
}

fn any_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['x', ' ', 'ß', '😀']), 0..=max)
        .prop_map(|chars| chars.into_iter().collect())
}

/// Adds `key` when `value` is given.
fn maybe(args: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        args.insert(key.into(), value);
    }
}

/// Argument objects the schema allows, one strategy per action (text kept short; ids up to
/// their full 160 code points, so a `messageId` may pass 256 bytes).
fn schema_valid_args() -> impl Strategy<Value = Value> {
    let id = || filled_string(160);
    let discover = (
        prop::option::of(any_string(64)),
        prop::option::of(1u8..=10),
        prop::option::of(any_string(8).prop_filter("non-empty", |s| !s.is_empty())),
    )
        .prop_map(|(query, limit, cursor)| {
            let mut a = map(json!({"action": "discover_agents"}));
            maybe(&mut a, "query", query.map(Value::from));
            maybe(&mut a, "limit", limit.map(Value::from));
            maybe(&mut a, "cursor", cursor.map(Value::from));
            Value::Object(a)
        });
    let message = (id(), filled_string(300), prop::option::of(id())).prop_map(|(c, t, m)| {
        let mut a = map(json!({"action": "message_existing", "conversationId": c, "text": t}));
        maybe(&mut a, "messageId", m.map(Value::from));
        Value::Object(a)
    });
    let selection = prop_oneof![
        Just(json!({"mode": "latest_or_new"})),
        Just(json!({"mode": "new"})),
        filled_string(160).prop_map(|c| json!({"mode": "specific", "conversationId": c})),
    ];
    let direct = (
        id(),
        filled_string(300),
        prop::option::of(selection),
        prop::option::of(id()),
    )
        .prop_map(|(p, t, s, m)| {
            let mut a = map(json!({"action": "start_direct", "principalId": p, "text": t}));
            maybe(&mut a, "selection", s);
            maybe(&mut a, "messageId", m.map(Value::from));
            Value::Object(a)
        });
    let group = (
        filled_string(100),
        prop::collection::btree_set(filled_string(160), 1..=49),
    )
        .prop_map(|(n, members)| {
            json!({"action": "create_group", "name": n, "memberIds": members.into_iter().collect::<Vec<_>>()})
        });
    let forward = (id(), id(), id(), prop::option::of(any_string(300))).prop_map(|(s, t, m, x)| {
        let mut a = map(
            json!({"action": "forward_message", "sourceConversationId": s,
                               "targetConversationId": t, "messageId": m}),
        );
        maybe(&mut a, "text", x.map(Value::from));
        Value::Object(a)
    });
    let share = (
        id(),
        id(),
        prop::option::of(any_string(300)),
        prop::option::of(id()),
    )
        .prop_map(|(c, u, x, m)| {
            let mut a =
                map(json!({"action": "share_contact", "conversationId": c, "contactUserId": u}));
            maybe(&mut a, "text", x.map(Value::from));
            maybe(&mut a, "messageId", m.map(Value::from));
            Value::Object(a)
        });
    let members = (id(), id(), any::<bool>()).prop_map(|(c, u, add)| {
        json!({"action": "manage_group_members", "conversationId": c, "userId": u,
               "operation": if add { "add" } else { "remove" }})
    });
    prop_oneof![discover, message, direct, group, forward, share, members]
}

/// Any JSON value up to a small depth, with the keys and values the validator looks at.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop::sample::select(vec![
            "discover_agents",
            "message_existing",
            "start_direct",
            "create_group",
            "forward_message",
            "share_contact",
            "manage_group_members",
            "add",
            "remove",
            "specific",
            "new",
            "latest_or_new",
            " ",
            "",
        ])
        .prop_map(Value::from),
        any_string(6).prop_map(Value::from),
    ];
    let keys = prop::sample::select(vec![
        "action",
        "text",
        "messageId",
        "conversationId",
        "principalId",
        "selection",
        "mode",
        "name",
        "memberIds",
        "sourceConversationId",
        "targetConversationId",
        "contactUserId",
        "userId",
        "operation",
        "query",
        "limit",
        "cursor",
        "other",
    ]);
    leaf.prop_recursive(3, 24, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(keys.clone().prop_map(str::to_owned), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn schema_valid_arguments_pass_the_code_checks(args in schema_valid_args()) {
        prop_assert!(validator().is_valid(&args), "the generator made a schema-invalid {}", args);
        let over_bytes = args["messageId"].as_str().is_some_and(|m| m.len() > MESSAGE_ID_MAX_BYTES);
        match validate(&args) {
            Ok(_) => prop_assert!(!over_bytes, "{}", args),
            Err(error) => {
                prop_assert!(over_bytes, "{}: {}", args, error);
                prop_assert_eq!(error, "communicate.messageId must be at most 256 UTF-8 bytes");
            }
        }
    }

    #[test]
    fn the_validator_never_panics_and_names_what_is_wrong(args in any_json()) {
        let authority = Authority::Live(OutboundPolicy::Open);
        if let Err(error) = plan(&args, authority, None) {
            prop_assert!(
                error.starts_with("communicate.") || error.ends_with(" contains unsupported fields"),
                "{}", error
            );
        }
    }

    #[test]
    fn any_result_maps_without_panicking(result in any_json(), which in 0usize..8) {
        let args = [
            json!({"action": "discover_agents"}),
            message_args(),
            direct_args(),
            json!({"action": "create_group", "name": "T", "memberIds": ["a"]}),
            json!({"action": "forward_message", "sourceConversationId": "s", "targetConversationId": "t", "messageId": "m"}),
            json!({"action": "share_contact", "conversationId": "c", "contactUserId": "u"}),
            json!({"action": "manage_group_members", "conversationId": "g", "userId": "u", "operation": "add"}),
            json!({"action": "manage_group_members", "conversationId": "g", "userId": "u", "operation": "remove"}),
        ];
        let planned = validate(&args[which]).expect("valid");
        let text = answer(&planned, Ok(map(result)));
        let envelope: Value = serde_json::from_str(&text).expect("JSON");
        prop_assert!(envelope["success"].is_boolean());
    }
}
