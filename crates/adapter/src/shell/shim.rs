//! Shim requests and notifications: each decoded request routed to the
//! session, the turn machine or an I/O helper, and the probe.

use super::*;
use crate::config::PROBE_VERIFY_BUDGET;
use crate::env::{empty, now_ms, random_u128};

impl Driver {
    pub(super) async fn on_request(&mut self, id: String, kind: String, body: Value) {
        let request = match ShimRequest::from_parts(&kind, body) {
            Ok(request) => request,
            Err(error) => {
                self.respond_error(&id, &kind, error.code(), error.to_string())
                    .await;
                return;
            }
        };
        tracing::debug!(id, kind = request.type_name(), "shim request");
        let facts = RequestFacts {
            daemon_version: env!("CARGO_PKG_VERSION"),
            manifest_sha256: self.config.manifest_sha256.as_deref(),
            home_channel: self.config.home_channel.as_deref(),
        };
        let request =
            match self
                .session
                .request(id.clone(), request, facts, now_ms(), random_u128())
            {
                Handled::Effects(effects) => {
                    self.perform(effects).await;
                    return;
                }
                Handled::Shell(request) => *request,
            };
        let re = request.type_name();
        match request {
            ShimRequest::Probe(probe) => self.probe(id, re, &probe).await,
            ShimRequest::AdapterConnect(connect) => {
                self.session.host_approvals_timeout = connect.host.approvals_timeout_s;
                let result = self
                    .connect(connect.seams.busy_handler, &connect.config.extra.0)
                    .await;
                self.session.connected = result.connected;
                let body = protocol::ShimResponse::AdapterConnect(result).to_body();
                self.respond(&id, re, Ok(body)).await;
            }
            ShimRequest::AdapterDisconnect(_) => {
                // No wire call: the loops just stop (canon-wire.md §8.1).
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.feed(Input::Disconnect).await;
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::Shutdown(_) => {
                self.stop_loops();
                self.stream = None;
                self.session.connected = false;
                self.cancel_hitl(None);
                self.respond(&id, re, Ok(empty())).await;
            }
            ShimRequest::StandaloneSend(send) => {
                // The session hands back only a send with media to upload
                // and a conversation to send it to.
                let home_channel_config =
                    requests::home_channel_config(send.pconfig.home_channel.as_ref());
                let request = self.session.register(id, re);
                let standalone = StandaloneSend {
                    request,
                    chat_id: send.chat_id,
                    home_channel_env: self.config.home_channel.clone(),
                    home_channel_config,
                    text: send.message,
                    media: None,
                    random: random_u128(),
                };
                match canon_host::turn::standalone_target(&standalone).map(str::to_owned) {
                    Some(target) => self.upload_standalone(
                        standalone,
                        target,
                        send.media_files,
                        send.force_document,
                    ),
                    None => self.feed(Input::Standalone(standalone)).await,
                }
            }
            ShimRequest::AdapterSendMedia(media) => self.send_media(id, re, media).await,
            ShimRequest::AdapterSendClarify(clarify) => self.send_clarify(id, re, clarify).await,
            ShimRequest::AdapterSendExecApproval(approval) => {
                self.send_exec_approval(id, re, approval).await
            }
            other => {
                // The session answers every other kind itself.
                tracing::error!(
                    kind = other.type_name(),
                    "request handed back by the session"
                );
                self.unsupported(&id, re, re).await;
            }
        }
    }

    pub(super) async fn on_notification(&mut self, kind: &str, body: Value) {
        let note = match ShimNotification::from_parts(kind, body) {
            Ok(note) => note,
            Err(error) => {
                tracing::debug!(kind, %error, "ignored a notification");
                return;
            }
        };
        if let Some(input) = requests::notification_input(note) {
            self.feed(input).await;
        }
    }

    /// `probe` (hermes-host.md §19.6): without `verify` from the
    /// configuration alone, with no network I/O; with it, one health or
    /// `GET /agents/me` call on a task of its own. Never carries the key.
    pub(super) async fn probe(&mut self, id: String, re: &'static str, probe: &Probe) {
        let facts = requests::ProbeFacts {
            api_key_set: !self.config.api_key.expose().is_empty(),
            base_url: &self.config.base_url,
            stream_url: &self.config.stream_url,
            environment_id: self.config.environment_id.as_deref(),
        };
        let mut result = match requests::probe(facts, probe.verify) {
            requests::ProbeStep::Verify(result) => result,
            requests::ProbeStep::Answer(result) => {
                let body = protocol::ShimResponse::Probe(result).to_body();
                self.respond(&id, re, Ok(body)).await;
                return;
            }
        };
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                result.error = Some(error.to_string());
                let body = protocol::ShimResponse::Probe(result).to_body();
                self.respond(&id, re, Ok(body)).await;
                return;
            }
        };
        let environment = self.config.environment_id.clone();
        let out = self.out.clone();
        self.spawn_background(async move {
            let check = async {
                match environment {
                    Some(environment) => client
                        .verify_environment(&environment, None)
                        .await
                        .map(drop),
                    None => client.get_me().await.map(drop),
                }
            };
            result.error = match tokio::time::timeout(PROBE_VERIFY_BUDGET, check).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some("Canon did not answer in time".to_owned()),
            };
            let body = protocol::ShimResponse::Probe(result).to_body();
            if out
                .send(protocol::encode_response(&id, re, Ok(body)))
                .await
                .is_err()
            {
                tracing::debug!("stdout writer is gone; probe answer dropped");
            }
        });
    }
}
