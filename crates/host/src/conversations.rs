//! The daemon's conversation cache and the chat facts read from it.
//!
//! The cache holds the conversation objects of `GET /conversations`
//! (replaced at connect and after `replay.expired`), the `conversation`
//! objects inbound messages carry, and `conversation.updated` changes. It is
//! bounded: beyond [`MAX_CONVERSATIONS`] the oldest entry is evicted. Its key
//! set, in insertion order, is the set of conversations the runtime-signal
//! pass visits, so every change of the key set is reported to the caller.

use std::collections::{HashMap, VecDeque};

use canon_dispatch::verbosity::ConversationType;
use canon_wire::types::Conversation;
use serde_json::{Map, Value};

use crate::protocol::{TurnContext, PLATFORM};

/// Conversations cached at most (our number); the oldest is evicted first.
pub const MAX_CONVERSATIONS: usize = 4_096;

/// The bounded conversation cache, in insertion order.
#[derive(Debug, Clone, Default)]
pub struct ConversationCache {
    objects: HashMap<String, Value>,
    order: VecDeque<String>,
}

impl ConversationCache {
    /// The cached object of a conversation.
    pub fn get(&self, id: &str) -> Option<&Value> {
        self.objects.get(id)
    }

    /// Caches a conversation object (replacing a cached one); `true` when
    /// the key set changed.
    pub fn insert(&mut self, id: &str, conversation: Value) -> bool {
        if self.objects.insert(id.to_owned(), conversation).is_some() {
            return false;
        }
        self.order.push_back(id.to_owned());
        while self.order.len() > MAX_CONVERSATIONS {
            if let Some(old) = self.order.pop_front() {
                self.objects.remove(&old);
            }
        }
        true
    }

    /// A `conversation.updated` event (canon-wire.md §5.3): the cached
    /// object, or `{id}` when there is none, with `changes` merged over it.
    /// `true` when the key set changed.
    pub fn apply_update(&mut self, id: &str, changes: Map<String, Value>) -> bool {
        let mut entry = self
            .objects
            .get(id)
            .cloned()
            .unwrap_or_else(|| serde_json::json!({ "id": id }));
        if let Value::Object(object) = &mut entry {
            object.extend(changes);
        }
        self.insert(id, entry)
    }

    /// Replaces the whole cache with a fresh `GET /conversations` list
    /// (canon-wire.md §4.2). The key set always counts as changed.
    pub fn replace(&mut self, conversations: Vec<Conversation>) {
        self.objects.clear();
        self.order.clear();
        for conversation in conversations {
            self.insert(&conversation.id, Value::Object(conversation.raw));
        }
    }

    /// The cached conversation ids in insertion order (the signal pass's
    /// key set).
    pub fn ids(&self) -> Vec<String> {
        self.order.iter().cloned().collect()
    }

    /// The chat facts of a conversation, from the cache (see [`chat_facts`]).
    pub fn chat_facts(&self, id: &str) -> (String, &'static str) {
        chat_facts(id, self.get(id))
    }
}

/// A chat's display name and Hermes chat type. The name is the first of
/// `name` and `topic` that is a string with something other than
/// whitespace, else the id; the type is `group` when the cached `type` is
/// `group`, else `dm` (canon-wire.md §4.2). A conversation the cache does
/// not hold is its id and `dm`.
///
/// This differs on purpose from `canon_dispatch::prompt::chat_name`, which
/// accepts a whitespace-only name: the shim has always been shown this rule
/// for `chat_info` and control signals, and changing either would change
/// what Hermes sees.
pub fn chat_facts(id: &str, conversation: Option<&Value>) -> (String, &'static str) {
    let Some(conversation) = conversation else {
        return (id.to_owned(), "dm");
    };
    let name = ["name", "topic"]
        .iter()
        .find_map(|key| {
            conversation
                .get(*key)
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or(id)
        .to_owned();
    let kind = if conversation.get("type").and_then(Value::as_str) == Some("group") {
        "group"
    } else {
        "dm"
    };
    (name, kind)
}

/// The conversation type of a Hermes chat type (`dm` or `direct`, `group`,
/// anything else unknown), for the turn's verbosity (turns.md §6.2).
pub fn conversation_type_of(chat_type: Option<&str>) -> ConversationType {
    match chat_type {
        Some("dm" | "direct") => ConversationType::Direct,
        Some("group") => ConversationType::Group,
        _ => ConversationType::Unknown,
    }
}

/// The chat id at the end of a Hermes session key
/// (`agent:main:canon:<type>:<chat id>`), a fallback when the turn machine
/// does not know the session.
pub fn chat_from_session_key(session_key: &str) -> String {
    session_key
        .rsplit(':')
        .next()
        .unwrap_or(session_key)
        .to_owned()
}

/// The chat of a hook's context, only inside a Canon turn: the platform is
/// `canon` and the chat id is not empty (hermes-host.md §19.6).
pub fn canon_chat(ctx: &TurnContext) -> Option<String> {
    if ctx.platform.as_deref() != Some(PLATFORM) {
        return None;
    }
    ctx.chat_id.clone().filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn chat_facts_read_name_topic_and_type_from_the_cache() {
        let check = |conversation: Option<Value>, expected: (&str, &str)| {
            let (name, kind) = chat_facts("conv-1", conversation.as_ref());
            assert_eq!((name.as_str(), kind), expected, "{conversation:?}");
        };
        check(None, ("conv-1", "dm"));
        check(
            Some(json!({"name": "Team", "type": "group"})),
            ("Team", "group"),
        );
        check(
            Some(json!({"name": " ", "topic": "Launch", "type": "direct"})),
            ("Launch", "dm"),
        );
        check(Some(json!({"type": 7, "name": 3})), ("conv-1", "dm"));
    }

    #[test]
    fn chat_id_comes_from_the_end_of_a_session_key() {
        assert_eq!(
            chat_from_session_key("agent:main:canon:dm:conv-1"),
            "conv-1"
        );
        assert_eq!(chat_from_session_key("bare"), "bare");
    }

    #[test]
    fn conversation_types_read_both_direct_spellings() {
        assert_eq!(conversation_type_of(Some("dm")), ConversationType::Direct);
        assert_eq!(
            conversation_type_of(Some("direct")),
            ConversationType::Direct
        );
        assert_eq!(conversation_type_of(Some("group")), ConversationType::Group);
        assert_eq!(
            conversation_type_of(Some("thread")),
            ConversationType::Unknown
        );
        assert_eq!(conversation_type_of(None), ConversationType::Unknown);
    }

    #[test]
    fn updates_create_then_merge_and_report_key_set_changes() {
        let mut cache = ConversationCache::default();
        let changes = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(cache.apply_update("c1", changes(json!({"name": "Team"}))));
        assert_eq!(cache.get("c1"), Some(&json!({"id": "c1", "name": "Team"})));
        assert!(!cache.apply_update("c1", changes(json!({"type": "group"}))));
        assert_eq!(
            cache.get("c1"),
            Some(&json!({"id": "c1", "name": "Team", "type": "group"}))
        );
        assert_eq!(cache.chat_facts("c1"), ("Team".to_owned(), "group"));
        assert!(!cache.insert("c1", json!({"id": "c1"})));
        assert!(cache.insert("c2", json!({"id": "c2"})));
        assert_eq!(cache.ids(), ["c1", "c2"]);
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_oldest() {
        let mut cache = ConversationCache::default();
        for n in 0..=MAX_CONVERSATIONS {
            assert!(cache.insert(&format!("c{n}"), json!({})));
        }
        assert_eq!(cache.ids().len(), MAX_CONVERSATIONS);
        assert!(cache.get("c0").is_none());
        assert!(cache.get("c1").is_some());
    }

    #[test]
    fn replace_keeps_only_the_fresh_list() {
        let mut cache = ConversationCache::default();
        cache.insert("old", json!({"id": "old"}));
        let fresh = Conversation::list_from(json!([{"id": "a", "name": "A"}, {"id": "b"}]));
        cache.replace(fresh);
        assert_eq!(cache.ids(), ["a", "b"]);
        assert!(cache.get("old").is_none());
        assert_eq!(
            cache.get("a").and_then(|c| c.get("name")),
            Some(&json!("A"))
        );
    }

    #[test]
    fn hooks_outside_canon_have_no_chat() {
        let ctx = |platform: &str, chat: &str| TurnContext {
            platform: Some(platform.to_owned()),
            chat_id: Some(chat.to_owned()),
            ..TurnContext::default()
        };
        assert_eq!(canon_chat(&ctx("canon", "c1")).as_deref(), Some("c1"));
        assert_eq!(canon_chat(&ctx("canon", "")), None);
        assert_eq!(canon_chat(&ctx("telegram", "c1")), None);
    }
}
