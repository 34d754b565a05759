//! One standalone send outside the daemon (hermes-host.md §15, turns.md §4.6,
//! canon-wire.md §8.8): the path of `canon-hermes send` for scripts and cron.
//!
//! It is the daemon's `standalone.send` without the shim: the same pure
//! planning (`canon_host::turn`'s `Input::Standalone`: the target rule, the
//! byte split, one `standalone:<32 hex>` id group, `send_to` with the part id
//! as `idempotencyKey`), the same client built from the same [`Config`], the
//! same environment check as `adapter.connect` (canon-wire.md §1.2, when an
//! environment is configured) and the same delivery, part by part with the
//! transport's with-id retries. Only the clock and the fresh randomness are
//! read here, as everywhere in the shell.
//!
//! Replay: the id group is the only input that is not the text and the
//! target. [`StandaloneReport::token`] names it and [`parse_token`] reads it
//! back, so running the same send again with [`StandaloneRequest::group`] set
//! to it sends byte-identical parts under the same ids: Canon answers the
//! parts it already stored with the stored messages and stores only the rest.

use std::collections::VecDeque;

use canon_chunking::ids::{StandaloneGroup, STANDALONE_TOKEN_PREFIX};
use canon_host::turn::{
    Effect, FailureClass, HostReply, Input, RequestId, StandaloneSend, TurnConfig, TurnMachine,
    STANDALONE_ERROR_PREFIX,
};
use canon_transport::CanonClient;

use crate::canon::{client_for, deliver};
use crate::env::{now_ms, random_u128};
use crate::shell::verify_environment;
use crate::Config;

/// What to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandaloneRequest {
    /// The conversation; `None` sends to [`Config::home_channel`]
    /// (`CANON_HOME_CHANNEL`).
    pub chat_id: Option<String>,
    /// The whole text, split into parts under Canon's byte limit.
    pub text: String,
    /// The id group of an earlier run to replay (from [`parse_token`]);
    /// `None` mints a fresh one, as every new invocation must.
    pub group: Option<u128>,
}

/// What a standalone send did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandaloneReport {
    /// The id group, `standalone:<32 hex>`: never on the wire, but what a
    /// replay of this send needs ([`parse_token`]).
    pub token: String,
    /// The conversation the parts went to, once planned.
    pub conversation_id: Option<String>,
    /// How many parts the text was split into (0 when nothing was planned).
    pub parts: usize,
    /// Canon's message id of the last part, or why the send failed.
    pub result: Result<Option<String>, StandaloneError>,
}

/// Why a standalone send failed. Every text is safe to print (no secret) and
/// starts with `Canon standalone send failed: ` (hermes-host.md §15).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StandaloneError {
    /// Nothing was sent: no target, a text that cannot be planned, a client
    /// that cannot be built, or an environment that does not check out.
    #[error("{0}")]
    NotSent(String),
    /// A part failed after the transport's retries; the parts before it
    /// landed, and this one may have.
    #[error("{error}")]
    Delivery {
        /// The error text.
        error: String,
        /// How the failed call failed (turns.md §4.4).
        class: FailureClass,
    },
}

/// Sends `request` with `config`'s credentials and connection.
pub async fn send(config: &Config, request: StandaloneRequest) -> StandaloneReport {
    let random = request.group.unwrap_or_else(random_u128);
    let mut report = StandaloneReport {
        token: StandaloneGroup::new("", random).token().to_owned(),
        conversation_id: None,
        parts: 0,
        result: Err(StandaloneError::NotSent(format!(
            "{STANDALONE_ERROR_PREFIX}could not plan"
        ))),
    };
    let mut machine = TurnMachine::new(TurnConfig::default());
    let send = StandaloneSend {
        request: RequestId(0),
        chat_id: request.chat_id,
        home_channel_env: config.home_channel.clone(),
        home_channel_config: None,
        text: request.text,
        media: None,
        random,
    };
    let mut effects: VecDeque<Effect> = machine.handle(Input::Standalone(send), now_ms()).into();
    let mut client: Option<CanonClient> = None;
    let mut failure_class = None;
    while let Some(effect) = effects.pop_front() {
        match effect {
            Effect::Deliver(delivery) => {
                report.conversation_id = Some(delivery.conversation_id.clone());
                report.parts = delivery.parts.len();
                let canon = match &client {
                    Some(canon) => canon.clone(),
                    None => match connect(config).await {
                        Ok(canon) => client.insert(canon).clone(),
                        Err(error) => {
                            report.result = Err(StandaloneError::NotSent(format!(
                                "{STANDALONE_ERROR_PREFIX}{error}"
                            )));
                            return report;
                        }
                    },
                };
                let op = delivery.op;
                let result = deliver(canon, delivery).await;
                failure_class = result.as_ref().err().map(|failure| failure.class);
                effects.extend(machine.handle(Input::DeliveryOutcome { op, result }, now_ms()));
            }
            Effect::Reply {
                reply: HostReply::Standalone(answer),
                ..
            } => {
                report.result = answer.map_err(|error| match failure_class {
                    Some(class) => StandaloneError::Delivery { error, class },
                    None => StandaloneError::NotSent(error),
                });
                return report;
            }
            other => tracing::debug!(?other, "standalone send: effect ignored"),
        }
    }
    report
}

/// The client of `config`, after the environment check `adapter.connect`
/// runs (canon-wire.md §1.2); the error is a safe text.
async fn connect(config: &Config) -> Result<CanonClient, String> {
    let client = client_for(config).map_err(|error| error.to_string())?;
    verify_environment(&client, config).await?;
    Ok(client)
}

/// The id group a [`StandaloneReport::token`] names: exactly
/// `standalone:<32 lowercase hex>` (surrounding whitespace ignored), else
/// `None`.
pub fn parse_token(token: &str) -> Option<u128> {
    let token = token.trim();
    let hex = token.strip_prefix(STANDALONE_TOKEN_PREFIX)?;
    if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let random = u128::from_str_radix(hex, 16).ok()?;
    // The inverse of the one formatter, so the two can never drift apart.
    (StandaloneGroup::new("", random).token() == token).then_some(random)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check(token: &str, expected: Option<u128>) {
        assert_eq!(parse_token(token), expected, "{token:?}");
    }

    #[test]
    fn tokens_parse_only_in_their_printed_form() {
        check("standalone:00000000000000000000000000000000", Some(0));
        check(
            "standalone:0123456789abcdef0123456789abcdef",
            Some(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
        );
        check(
            "  standalone:ffffffffffffffffffffffffffffffff\n",
            Some(u128::MAX),
        );
        check("standalone:0123456789ABCDEF0123456789ABCDEF", None);
        check("0123456789abcdef0123456789abcdef", None);
        check("standalone:0123456789abcdef0123456789abcde", None);
        check("standalone:0123456789abcdef0123456789abcdef0", None);
        check("standalone:+123456789abcdef0123456789abcdef", None);
        check("standalone:", None);
        check("", None);
        check("hermes-final-0123456789abcdef0123456789abcdef", None);
    }

    proptest! {
        #[test]
        fn every_token_reads_back_as_its_group(random in any::<u128>()) {
            let token = StandaloneGroup::new("c-direct", random).token().to_owned();
            prop_assert_eq!(parse_token(&token), Some(random));
        }

        #[test]
        fn an_accepted_token_is_the_printed_form(text in "\\PC*") {
            if let Some(random) = parse_token(&text) {
                let group = StandaloneGroup::new("", random);
                prop_assert_eq!(group.token(), text.trim());
            }
        }

        #[test]
        fn near_tokens_never_panic(hex in "[0-9a-fA-F+-]{0,40}") {
            let token = format!("{STANDALONE_TOKEN_PREFIX}{hex}");
            let parsed = parse_token(&token);
            let canonical = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            prop_assert_eq!(parsed.is_some(), canonical);
        }
    }
}
