//! Delivery-intent parsing (`turns.md` §10.1).
//!
//! The intent is `message.metadata.deliveryIntent`, trimmed and lowercased
//! (0.14.1's lenient reading, turns.md OQ-13; the contracts'
//! `normalizeTurnMetadata` requires an exact match instead). Anything
//! unrecognized, and a missing value, is the protocol default
//! [`DeliveryIntent::Queue`]. The intent only matters when the session
//! already runs a turn; routing it is the shim's job (turns.md §10.2).
//!
//! Invariant: total over arbitrary JSON; leniency can only turn `queue` into
//! the value the sender evidently meant.

use serde_json::Value;

use crate::protocol::DeliveryIntent;

/// The recognized intent of a raw `deliveryIntent` value, after trimming
/// (Python whitespace) and lowercasing; `None` when absent or unrecognized.
pub fn parse_delivery_intent(raw: Option<&Value>) -> Option<DeliveryIntent> {
    let trimmed = raw?.as_str()?.trim_matches(crate::prompt::is_py_space);
    // Full Unicode lowercasing, as Python's `str.lower` does (the Kelvin sign
    // U+212A, for example, folds onto ASCII `k`).
    DeliveryIntent::from_wire(&trimmed.to_lowercase())
}

/// The delivery intent of a message (`message.metadata.deliveryIntent`),
/// defaulting to [`DeliveryIntent::Queue`].
pub fn delivery_intent(message: &Value) -> DeliveryIntent {
    let raw = message
        .get("metadata")
        .filter(|m| m.is_object())
        .and_then(|m| m.get("deliveryIntent"));
    parse_delivery_intent(raw).unwrap_or(DeliveryIntent::Queue)
}

/// turns.md §9.1 step 10: an `interleave` whose trusted media was hidden
/// from the model becomes `queue`, because a steer would strand the bytes
/// outside the running turn. Every other intent is unchanged.
pub fn demote_for_hidden_media(intent: DeliveryIntent, media_hidden: bool) -> DeliveryIntent {
    if media_hidden && intent == DeliveryIntent::Interleave {
        DeliveryIntent::Queue
    } else {
        intent
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(metadata: Value, expected: DeliveryIntent) {
        let message = json!({ "metadata": metadata });
        assert_eq!(delivery_intent(&message), expected, "{metadata}");
    }

    #[test]
    fn exact_values_parse() {
        for intent in DeliveryIntent::ALL {
            check(json!({"deliveryIntent": intent.as_str()}), *intent);
        }
    }

    #[test]
    fn case_and_whitespace_are_forgiven() {
        check(json!({"deliveryIntent": " STOP\n"}), DeliveryIntent::Stop);
        check(
            json!({"deliveryIntent": "Interrupt"}),
            DeliveryIntent::Interrupt,
        );
        check(
            json!({"deliveryIntent": "\tinterLEAVE "}),
            DeliveryIntent::Interleave,
        );
        check(
            json!({"deliveryIntent": "\u{3000}queue"}),
            DeliveryIntent::Queue,
        );
    }

    #[test]
    fn absent_or_unrecognized_means_queue() {
        check(json!({}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": null}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": ["stop"]}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": 1}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": "later"}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": "st op"}), DeliveryIntent::Queue);
        check(json!({"deliveryIntent": ""}), DeliveryIntent::Queue);
        check(json!(["stop"]), DeliveryIntent::Queue);
        check(json!("stop"), DeliveryIntent::Queue);
        assert_eq!(delivery_intent(&json!(null)), DeliveryIntent::Queue);
    }

    #[test]
    fn parse_reports_absence_separately_from_queue() {
        assert_eq!(parse_delivery_intent(None), None);
        assert_eq!(parse_delivery_intent(Some(&json!("nope"))), None);
        assert_eq!(
            parse_delivery_intent(Some(&json!("queue"))),
            Some(DeliveryIntent::Queue)
        );
    }

    #[test]
    fn hidden_media_demotes_only_interleave() {
        for intent in DeliveryIntent::ALL {
            let expected = if *intent == DeliveryIntent::Interleave {
                DeliveryIntent::Queue
            } else {
                *intent
            };
            assert_eq!(demote_for_hidden_media(*intent, true), expected);
            assert_eq!(demote_for_hidden_media(*intent, false), *intent);
        }
    }
}
