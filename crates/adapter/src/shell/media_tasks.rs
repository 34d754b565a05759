//! Media through the shell: outbound uploads before the turn machine
//! sends the message, and inbound downloads that hold their message's
//! place in its conversation's lane.

use super::*;
use crate::env::random_u128;
use crate::inbound_media::materialize;
use crate::tasks::{AbortOnDrop, MediaDone, Uploaded};

impl Driver {
    /// `adapter.send_media` (hermes-host.md §19.6): a silenced turn is
    /// answered at once with success and nothing uploaded; otherwise the
    /// file is uploaded on a task (at most [`outbound::UPLOAD_CONCURRENCY`]
    /// at once) and the message is then the machine's
    /// ([`Input::Media`]).
    pub(super) async fn send_media(
        &mut self,
        id: String,
        re: &'static str,
        media: protocol::AdapterSendMedia,
    ) {
        let request = self.session.register(id, re);
        let session_key = media.ctx.session_key.clone();
        if let Some(answer) =
            self.session
                .silenced_media(request, session_key.as_deref(), &media.chat_id)
        {
            self.perform(vec![answer]).await;
            return;
        }
        let client = match self.client() {
            Ok(client) => client,
            Err(error) => {
                self.answer_upload_error(request, false, error.to_string())
                    .await;
                return;
            }
        };
        let downloader = self.media_downloader();
        let permits = self.upload_permits.clone();
        let done = self.upload_tx.clone();
        let item = outbound::MediaItem {
            op: media.op,
            url: media.url,
            path: media.path,
            file_name: media.file_name,
            mime_type: media.mime_type,
            duration_ms: media.duration_ms,
        };
        let random = random_u128();
        self.upload_tasks.spawn(async move {
            let _permit = permits.acquire_owned().await;
            let result = outbound::upload_item(&client, &downloader, &media.chat_id, &item)
                .await
                .map(|payload| {
                    Input::Media(HostMedia {
                        request,
                        session_key,
                        conversation_id: media.chat_id,
                        caption: media.caption.unwrap_or_default(),
                        reply_to: media.reply_to,
                        metadata: media.metadata.unwrap_or_default(),
                        media: payload,
                        random,
                    })
                });
            let _ = done
                .send(Uploaded {
                    request,
                    standalone: false,
                    result,
                })
                .await;
        });
    }

    /// `standalone.send` with `media_files` (hermes-host.md §15): every
    /// file is uploaded first, then the text goes out as one standalone id
    /// group with the media on the final part.
    pub(super) fn upload_standalone(
        &mut self,
        mut send: StandaloneSend,
        target: String,
        files: Vec<String>,
        force_document: bool,
    ) {
        let request = send.request;
        let done = self.upload_tx.clone();
        let permits = self.upload_permits.clone();
        let client = self.client();
        self.upload_tasks.spawn(async move {
            let result = match client {
                Ok(client) => {
                    let _permit = permits.acquire_owned().await;
                    outbound::upload_files(&client, &target, &files, force_document).await
                }
                Err(error) => Err(error.to_string()),
            };
            let result = result.map(|payload: MediaPayload| {
                send.media = Some(payload);
                Input::Standalone(send)
            });
            let _ = done
                .send(Uploaded {
                    request,
                    standalone: true,
                    result,
                })
                .await;
        });
    }

    /// An upload finished: feed its input, or answer its error.
    pub(super) async fn on_uploaded(&mut self, uploaded: Uploaded) {
        while self.upload_tasks.try_join_next().is_some() {}
        match uploaded.result {
            Ok(input) => self.feed(input).await,
            Err(error) => {
                self.answer_upload_error(uploaded.request, uploaded.standalone, error)
                    .await
            }
        }
    }

    pub(super) async fn answer_upload_error(
        &mut self,
        request: RequestId,
        standalone: bool,
        error: String,
    ) {
        tracing::warn!(%error, "outbound media not sent");
        let reply = canon_host::answers::upload_failed(standalone, error);
        self.reply(request, reply).await;
    }

    /// The guarded media downloader (built here when no connect did yet).
    pub(super) fn media_downloader(&mut self) -> MediaDownloader {
        self.downloader
            .get_or_insert_with(|| {
                MediaDownloader::new(MediaOptions {
                    policy: AddressPolicy {
                        allow_private: self.config.allow_private_urls,
                        allow_loopback: false,
                    },
                    ..MediaOptions::default()
                })
            })
            .clone()
    }

    /// Materializes a waking message's attachments on a task of its own
    /// (runtime-control.md §8.2–§8.3); the message takes its place in the
    /// conversation's lane now and is sent from [`Driver::on_media_done`].
    pub(super) fn spawn_media(
        &mut self,
        job: u64,
        conversation_id: String,
        message: InboundMessage,
        source: Value,
        attachments: Vec<Value>,
        intent: DeliveryIntent,
    ) {
        let scope = self.session.media_scope;
        let downloader = self.downloader.clone();
        let dir = self.media_dir.clone();
        let permits = Arc::clone(&self.media_permits);
        let done = self.media_done.clone();
        // If the work task dies, the message still goes out: no media, and
        // every attachment that needs it counted unavailable (fail closed).
        let fallback = finish_inbound(
            message.clone(),
            &source,
            scope,
            Vec::new(),
            media::all_unavailable(scope, &attachments),
            intent,
        );
        while self.media_tasks.try_join_next().is_some() {}
        self.media_tasks.spawn(async move {
            let work = tokio::spawn(async move {
                // A closed semaphore cannot happen (never closed); go on.
                let _permit = permits.acquire_owned().await.ok();
                let (listed, counts) =
                    materialize(downloader.as_ref(), dir.as_deref(), scope, &attachments).await;
                finish_inbound(message, &source, scope, listed, counts, intent)
            });
            let _abort = AbortOnDrop(work.abort_handle());
            let message = match work.await {
                Ok(message) => message,
                Err(error) => {
                    tracing::error!(%error, "inbound media task failed; sending without media");
                    fallback
                }
            };
            let _ = done
                .send(MediaDone {
                    conversation_id,
                    job,
                    message: Box::new(message),
                })
                .await;
        });
    }

    /// A media task finished: its message becomes ready, and the front of
    /// its lane is sent in order.
    pub(super) async fn on_media_done(&mut self, done: MediaDone) {
        let MediaDone {
            conversation_id,
            job,
            message,
        } = done;
        let Some(ready) = self.session.lanes.finished(&conversation_id, job, *message) else {
            tracing::error!(conversation_id, job, "media result for no pending message");
            debug_assert!(false, "media result for no pending message");
            return;
        };
        for message in ready {
            self.send_request(DaemonRequest::InboundMessage(message))
                .await;
        }
    }
}
