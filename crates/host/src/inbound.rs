//! What the daemon decides about an inbound Canon message once the wake
//! pipeline (`canon_dispatch::pipeline`) said it wakes a turn: the
//! `inbound.message` it becomes, the facts remembered for the `turn.start`
//! that follows, the per-conversation lanes that keep messages in order while
//! their attachments download, and how a downloaded message is finished.

use std::collections::{HashMap, VecDeque};

use canon_dispatch::intent::demote_for_hidden_media;
use canon_dispatch::pipeline::WakeEvent;
use canon_dispatch::protocol::DeliveryIntent;
use canon_dispatch::verbosity::ConversationType;
use canon_wire::authority::ReplyAuthority;
use canon_wire::secret::Opaque;
use serde_json::{Map, Value};

use crate::conversations::conversation_type_of;
use crate::media::capture::CaptureBatch;
use crate::media::{self, MediaCounts, TrustedScope};
use crate::protocol::{
    EventSource, EventSummary, InboundEvent, InboundMedia, InboundMessage, InboundMetadata,
};

/// Inbound events remembered for `turn.start` lookups (our number); the
/// oldest is forgotten first.
pub const MAX_EVENTS: usize = 1_024;

/// Whether a Canon message carries `metadata.inboundDisposition: queued`
/// (it was queued behind a running turn and must be acknowledged when its
/// own turn starts, turns.md §10.3).
pub fn disposition_queued(message: &Map<String, Value>) -> bool {
    message
        .get("metadata")
        .and_then(|m| m.get("inboundDisposition"))
        .and_then(Value::as_str)
        == Some("queued")
}

/// A message's attachments, when it has any.
pub fn attachments(message: &Map<String, Value>) -> Option<Vec<Value>> {
    message
        .get("attachments")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .cloned()
}

/// The `inbound.message` of a waking event, before any media: text
/// message, the event's source, the delivery intent in its metadata and
/// the host payload (without the reply authority) as the raw event.
pub fn wake_message(event_ref: String, wake: WakeEvent) -> InboundMessage {
    InboundMessage {
        event_ref,
        event: InboundEvent {
            text: wake.text,
            message_type: "text".into(),
            source: EventSource {
                chat_id: wake.source.chat_id,
                chat_name: wake.source.chat_name,
                chat_type: wake.source.chat_type.to_owned(),
                user_id: wake.source.user_id,
                user_name: wake.source.user_name,
                message_id: wake.source.message_id.clone(),
                thread_id: None,
            },
            message_id: wake.source.message_id,
            reply_to_message_id: wake.reply_to_message_id,
            media: Vec::new(),
            channel_prompt: wake.channel_prompt,
            channel_context: wake.channel_context,
            metadata: InboundMetadata {
                delivery_intent: Some(wake.delivery_intent.as_str().to_owned()),
            },
            raw: Opaque(wake.host_payload),
            internal: false,
        },
        reply_authority: None,
    }
}

/// What the download of a message's attachments found
/// (runtime-control.md §8.3), for the session to register and finish.
#[derive(Debug, Clone, PartialEq)]
pub struct Materialized {
    /// The Canon message object (the markers read it).
    pub source: Value,
    /// The delivery intent before any demotion.
    pub intent: DeliveryIntent,
    /// The trusted scope the attachments were classified under.
    pub scope: TrustedScope,
    /// The media handed to Hermes.
    pub listed: Vec<InboundMedia>,
    /// Hidden and unavailable attachments.
    pub counts: MediaCounts,
    /// The trusted captures (runtime-control.md §8.3 step 7).
    pub captures: CaptureBatch,
}

/// Finishes a message whose attachments were materialized: the model-facing
/// markers in its text (with `available` hidden attachments readable by
/// trusted tools, runtime-control.md §8.5), its Hermes message type, its
/// media files, and the delivery intent demoted from `interleave` to
/// `queue` when hidden media were registered (a steer injects text only
/// and would strand the bytes outside that turn, runtime-control.md §8.6).
pub fn finish_inbound(
    mut message: InboundMessage,
    source: &Value,
    scope: TrustedScope,
    listed: Vec<InboundMedia>,
    counts: MediaCounts,
    available: usize,
    intent: DeliveryIntent,
) -> InboundMessage {
    message.event.text = media::final_text(&message.event.text, source, scope, counts, available);
    if let Some(message_type) = media::message_type(listed.iter().map(|m| m.kind)) {
        message.event.message_type = message_type.to_owned();
    }
    message.event.media = listed;
    let intent = demote_for_hidden_media(intent, available.min(counts.hidden) > 0);
    message.event.metadata.delivery_intent = Some(intent.as_str().to_owned());
    message
}

/// What the daemon remembers of an inbound event it handed to the shim.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEvent {
    /// The Canon message id.
    pub message_id: Option<String>,
    /// The validated reply authority of the message.
    pub reply_authority: Option<ReplyAuthority>,
    /// The conversation type the wake pipeline saw.
    pub conversation_type: ConversationType,
    /// The message was queued behind a running turn.
    pub disposition_queued: bool,
}

/// The inbound events handed to the shim, by event reference (`e:<n>`, or
/// `e:<instance>.<n>` in a daemon with an instance token), bounded by
/// [`MAX_EVENTS`].
#[derive(Debug, Clone, Default)]
pub struct EventTable {
    events: HashMap<String, PendingEvent>,
    order: VecDeque<String>,
    next: u64,
    /// `<instance>.`, or empty.
    prefix: String,
}

impl EventTable {
    /// A table whose references carry `instance`, so that no two daemon
    /// processes hand out the same reference (empty: plain `e:<n>`).
    pub fn for_instance(instance: &str) -> EventTable {
        EventTable {
            prefix: if instance.is_empty() {
                String::new()
            } else {
                format!("{instance}.")
            },
            ..EventTable::default()
        }
    }

    /// Remembers an event under a fresh reference, forgetting the oldest
    /// beyond the bound; the reference.
    pub fn remember(&mut self, event: PendingEvent) -> String {
        self.next += 1;
        let event_ref = format!("e:{}{}", self.prefix, self.next);
        while self.order.len() >= MAX_EVENTS {
            if let Some(old) = self.order.pop_front() {
                self.events.remove(&old);
            }
        }
        self.order.push_back(event_ref.clone());
        self.events.insert(event_ref.clone(), event);
        event_ref
    }

    /// The event under a reference.
    pub fn get(&self, event_ref: &str) -> Option<&PendingEvent> {
        self.events.get(event_ref)
    }

    /// Forgets an event (its turn completed).
    pub fn forget(&mut self, event_ref: &str) {
        self.events.remove(event_ref);
    }

    /// The conversation type of a turn that starts for `event`: the type
    /// remembered with the event when known, else the chat type the shim
    /// reported, else `fallback` (the wake pipeline's view of the
    /// conversation, computed by the caller only when needed).
    pub fn turn_conversation_type(
        &self,
        event_ref: &str,
        event: &EventSummary,
        fallback: impl FnOnce() -> ConversationType,
    ) -> ConversationType {
        self.get(event_ref)
            .map(|p| p.conversation_type)
            .filter(|t| *t != ConversationType::Unknown)
            .or_else(|| {
                event
                    .chat_type
                    .as_deref()
                    .map(|t| conversation_type_of(Some(t)))
            })
            .unwrap_or_else(fallback)
    }

    /// The Canon message ids of the events Hermes merged into one turn.
    pub fn message_ids(&self, event_refs: &[String]) -> Vec<String> {
        event_refs
            .iter()
            .filter_map(|r| self.get(r).and_then(|e| e.message_id.clone()))
            .collect()
    }
}

/// One message in its conversation's lane.
#[derive(Debug, Clone, PartialEq)]
enum LaneItem {
    /// Media job `n` is still materializing this message.
    Pending(u64),
    /// Ready; sent once everything before it in the lane was sent.
    Ready(Box<InboundMessage>),
}

/// Per-conversation ordered lanes: a message whose attachments download
/// holds its place, and the messages behind it in the same conversation
/// wait for it. Other conversations are not held up.
#[derive(Debug, Clone, Default)]
pub struct InboundLanes {
    lanes: HashMap<String, VecDeque<LaneItem>>,
    items: usize,
    next_job: u64,
}

impl InboundLanes {
    /// Messages held in lanes (the stream is not read while too many are).
    pub fn items(&self) -> usize {
        self.items
    }

    /// A message without media: `Some` to send it now, or `None` when it
    /// waits behind its conversation's downloading messages.
    pub fn ready(
        &mut self,
        conversation_id: &str,
        message: InboundMessage,
    ) -> Option<InboundMessage> {
        match self.lanes.get_mut(conversation_id) {
            Some(lane) => {
                lane.push_back(LaneItem::Ready(Box::new(message)));
                self.items += 1;
                None
            }
            None => Some(message),
        }
    }

    /// A message whose media start downloading: its place in the lane, as
    /// the job number the download reports back with.
    pub fn pending(&mut self, conversation_id: &str) -> u64 {
        self.next_job += 1;
        self.lanes
            .entry(conversation_id.to_owned())
            .or_default()
            .push_back(LaneItem::Pending(self.next_job));
        self.items += 1;
        self.next_job
    }

    /// A download finished: its message becomes ready, and every ready
    /// message at the front of the lane is returned in order, to send now.
    /// `None` when no such job waits (a bug: nothing is sent).
    pub fn finished(
        &mut self,
        conversation_id: &str,
        job: u64,
        message: InboundMessage,
    ) -> Option<Vec<InboundMessage>> {
        let lane = self.lanes.get_mut(conversation_id)?;
        let slot = lane
            .iter_mut()
            .find(|item| matches!(item, LaneItem::Pending(j) if *j == job))?;
        *slot = LaneItem::Ready(Box::new(message));
        let mut ready = Vec::new();
        while matches!(lane.front(), Some(LaneItem::Ready(_))) {
            if let Some(LaneItem::Ready(message)) = lane.pop_front() {
                ready.push(*message);
            }
        }
        if lane.is_empty() {
            self.lanes.remove(conversation_id);
        }
        self.items = self.items.saturating_sub(ready.len());
        Some(ready)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::media::MediaCounts;

    fn message(event_ref: &str) -> InboundMessage {
        InboundMessage {
            event_ref: event_ref.to_owned(),
            event: InboundEvent {
                text: "hi".into(),
                message_type: "text".into(),
                source: EventSource {
                    chat_id: "c1".into(),
                    chat_name: None,
                    chat_type: "dm".into(),
                    user_id: None,
                    user_name: None,
                    message_id: None,
                    thread_id: None,
                },
                message_id: None,
                reply_to_message_id: None,
                media: Vec::new(),
                channel_prompt: None,
                channel_context: None,
                metadata: InboundMetadata::default(),
                raw: Opaque::default(),
                internal: false,
            },
            reply_authority: None,
        }
    }

    fn refs(messages: &[InboundMessage]) -> Vec<&str> {
        messages.iter().map(|m| m.event_ref.as_str()).collect()
    }

    #[test]
    fn lanes_keep_each_conversations_order_and_release_in_order() {
        let mut lanes = InboundLanes::default();
        assert_eq!(
            lanes.ready("c1", message("a")).map(|m| m.event_ref),
            Some("a".into())
        );
        let first = lanes.pending("c1");
        let second = lanes.pending("c1");
        assert_eq!(lanes.ready("c1", message("d")), None);
        // Another conversation is not held up.
        assert!(lanes.ready("c2", message("x")).is_some());
        assert_eq!(lanes.items(), 3);
        // The second download finishing first releases nothing.
        assert_eq!(
            lanes.finished("c1", second, message("c")).map(|r| r.len()),
            Some(0)
        );
        let released = lanes
            .finished("c1", first, message("b"))
            .expect("a pending job");
        assert_eq!(refs(&released), ["b", "c", "d"]);
        assert_eq!(lanes.items(), 0);
        // The lane is gone: the next message goes at once.
        assert!(lanes.ready("c1", message("e")).is_some());
        assert_eq!(lanes.finished("c1", first, message("z")), None);
    }

    #[test]
    fn two_daemon_instances_never_hand_out_the_same_reference() {
        // A respawned daemon's table must not name an event the shim still
        // holds from the one before it (another message's reply authority).
        let pending = PendingEvent {
            message_id: Some("m1".to_owned()),
            reply_authority: None,
            conversation_type: ConversationType::Direct,
            disposition_queued: false,
        };
        let mut before = EventTable::for_instance("0badf00d");
        let mut after = EventTable::for_instance("feedface");
        let old: Vec<String> = (0..5).map(|_| before.remember(pending.clone())).collect();
        assert_eq!(old[0], "e:0badf00d.1");
        for _ in 0..5 {
            let fresh = after.remember(pending.clone());
            assert!(!old.contains(&fresh), "{fresh} reused");
        }
        assert!(after.get(&old[0]).is_none());
    }

    #[test]
    fn the_event_table_is_bounded_and_forgets() {
        let mut table = EventTable::default();
        let pending = |id: &str| PendingEvent {
            message_id: Some(id.to_owned()),
            reply_authority: None,
            conversation_type: ConversationType::Group,
            disposition_queued: false,
        };
        let first = table.remember(pending("m0"));
        assert_eq!(first, "e:1");
        for n in 1..MAX_EVENTS {
            table.remember(pending(&format!("m{n}")));
        }
        assert!(table.get(&first).is_some());
        let last = table.remember(pending("last"));
        assert!(table.get(&first).is_none(), "the oldest is forgotten");
        assert_eq!(
            table.message_ids(&[last.clone(), first, "e:2".into()]),
            ["last", "m1"]
        );
        table.forget(&last);
        assert!(table.get(&last).is_none());
    }

    #[test]
    fn a_turns_conversation_type_prefers_the_event_then_the_shim_then_the_fallback() {
        let mut table = EventTable::default();
        let known = table.remember(PendingEvent {
            message_id: None,
            reply_authority: None,
            conversation_type: ConversationType::Group,
            disposition_queued: false,
        });
        let unknown = table.remember(PendingEvent {
            message_id: None,
            reply_authority: None,
            conversation_type: ConversationType::Unknown,
            disposition_queued: false,
        });
        let summary = |chat_type: Option<&str>| EventSummary {
            chat_id: "c1".into(),
            chat_type: chat_type.map(str::to_owned),
            ..EventSummary::default()
        };
        let never = || -> ConversationType { panic!("the fallback is not needed") };
        assert_eq!(
            table.turn_conversation_type(&known, &summary(Some("dm")), never),
            ConversationType::Group
        );
        assert_eq!(
            table.turn_conversation_type(&unknown, &summary(Some("dm")), never),
            ConversationType::Direct
        );
        assert_eq!(
            table.turn_conversation_type("e:99", &summary(None), || ConversationType::Group),
            ConversationType::Group
        );
    }

    #[test]
    fn message_facts_read_disposition_and_attachments() {
        let object = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(disposition_queued(&object(
            json!({"metadata": {"inboundDisposition": "queued"}})
        )));
        assert!(!disposition_queued(&object(
            json!({"metadata": {"inboundDisposition": "now"}})
        )));
        assert!(!disposition_queued(&object(json!({}))));
        assert_eq!(attachments(&object(json!({"attachments": []}))), None);
        assert_eq!(
            attachments(&object(json!({"attachments": [{"url": "u"}]}))),
            Some(vec![json!({"url": "u"})])
        );
    }

    #[test]
    fn finishing_a_message_applies_markers_type_and_demotion() {
        let message = |text: &str| {
            let mut built = message("e:1");
            built.event.text = text.into();
            built
        };
        let pdf = InboundMedia {
            path: "/tmp/x.pdf".into(),
            mime_type: "application/pdf".into(),
            kind: crate::protocol::MediaKind::Document,
            file_name: Some("x.pdf".into()),
        };
        let source = serde_json::json!({"contentType": "image"});
        let hidden = MediaCounts {
            hidden: 1,
            unavailable: 0,
        };
        let done = finish_inbound(
            message("[image attachment: a.png; file attachment: x.pdf]"),
            &source,
            TrustedScope::Image,
            vec![pdf.clone()],
            hidden,
            1,
            DeliveryIntent::Interleave,
        );
        assert_eq!(
            done.event.text,
            "[1 image attachment is available to trusted Canon tools and not sent to the model's general vision pipeline.]"
        );
        assert_eq!(done.event.message_type, "document");
        assert_eq!(done.event.media, vec![pdf]);
        assert_eq!(
            done.event.metadata.delivery_intent.as_deref(),
            Some("queue")
        );
        let plain = finish_inbound(
            message("hi"),
            &serde_json::json!({"text": "hi"}),
            TrustedScope::None,
            Vec::new(),
            MediaCounts::default(),
            0,
            DeliveryIntent::Interleave,
        );
        assert_eq!(plain.event.text, "hi");
        assert_eq!(plain.event.message_type, "text");
        assert_eq!(
            plain.event.metadata.delivery_intent.as_deref(),
            Some("interleave")
        );
        // Hidden but not registered: withheld, and nothing to strand, so
        // the intent stays (runtime-control.md §8.6 demotes only for
        // registered media).
        let withheld = finish_inbound(
            message(""),
            &source,
            TrustedScope::Image,
            Vec::new(),
            hidden,
            0,
            DeliveryIntent::Interleave,
        );
        assert_eq!(
            withheld.event.text,
            "[1 image attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]"
        );
        assert_eq!(
            withheld.event.metadata.delivery_intent.as_deref(),
            Some("interleave")
        );
    }
}
