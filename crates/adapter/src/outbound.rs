//! Outbound media (canon-wire.md §7.4, hermes-host.md §8.3, §15, §19.6): read
//! a local file (or download a remote image through the SSRF guard), upload it
//! (`POST /media/upload`, canon-wire.md §4.4) and shape the attachment object
//! and the message `contentType`. The turn machine then sends the message
//! ([`canon_host::turn::Input::Media`], [`canon_host::turn::StandaloneSend`]).
//!
//! Files are read from the path Hermes gives (same user); a file above
//! [`MAX_UPLOAD_BYTES`] is refused before it is read, with
//! [`UPLOAD_LIMIT_ERROR`]. File contents never reach a log line.

use canon_host::media::{extension, mime_for_extension, normalize_mime, url_path};
use canon_host::protocol::MediaOp;
use canon_host::turn::MediaPayload;
use canon_transport::media::MediaDownloader;
use canon_transport::{CanonClient, TransportError};
use canon_wire::types::{attachment_kind, UploadMedia};
use serde_json::{Map, Value};
use std::time::Duration;

/// The per-file upload cap (canon-wire.md §4.4): 10 MiB.
pub(crate) const MAX_UPLOAD_BYTES: u64 = 10 * 1024 * 1024;

/// The error of a file above [`MAX_UPLOAD_BYTES`] (exact, canon-wire.md §4.4).
pub(crate) const UPLOAD_LIMIT_ERROR: &str = "Canon media upload limit is 10MB";

/// At most this many `adapter.send_media` / standalone uploads run at once
/// (hermes-host.md §19.9).
pub(crate) const UPLOAD_CONCURRENCY: usize = 8;

/// Upload tasks waiting or running at most: each belongs to one shim request, so the shim's
/// in-flight cap (hermes-host.md §19.9, 64) is the natural bound; beyond it an upload fails at
/// once instead of piling up tasks.
pub(crate) const MAX_UPLOAD_TASKS: usize = 64;

/// The failure of an upload beyond [`MAX_UPLOAD_TASKS`].
pub(crate) const TOO_MANY_UPLOADS: &str = "Too many Canon uploads are waiting; try again shortly";

/// One media item to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MediaItem {
    /// The Hermes method.
    pub op: MediaOp,
    /// Remote URL (`image_url`; a `file://` URL is read as a local path).
    pub url: Option<String>,
    /// Local path.
    pub path: Option<String>,
    /// The file name Hermes gave (`document`).
    pub file_name: Option<String>,
    /// The caller's MIME hint.
    pub mime_type: Option<String>,
    /// Audio duration.
    pub duration_ms: Option<u64>,
}

/// The MIME type of a local file: the caller's hint, else the extension
/// (canon-wire.md §7.4 fallbacks), else `application/octet-stream`.
pub(crate) fn local_mime(path: &str, hint: Option<&str>) -> String {
    if let Some(mime) = hint.and_then(normalize_mime) {
        return mime;
    }
    let ext = extension(path).unwrap_or_default();
    match ext.as_str() {
        ".m4a" => return "audio/mp4".to_owned(),
        ".opus" => return "audio/ogg".to_owned(),
        _ => {}
    }
    if let Some(mime) = mime_for_extension(&ext) {
        return mime.to_owned();
    }
    match ext.as_str() {
        ".mp4" | ".mov" | ".m4v" | ".webm" | ".mkv" | ".avi" | ".3gp" => "video/mp4",
        ".png" | ".jpg" | ".jpeg" | ".gif" | ".webp" | ".bmp" | ".heic" => "image/jpeg",
        ".mp3" | ".wav" | ".ogg" | ".flac" | ".aac" => "audio/mpeg",
        _ => "application/octet-stream",
    }
    .to_owned()
}

/// The basename of a path or URL path; `None` when empty.
pub(crate) fn basename(path: &str) -> Option<String> {
    let leaf = path.rsplit(['/', '\\']).next().unwrap_or_default();
    (!leaf.is_empty() && leaf != "." && leaf != "..").then(|| leaf.to_owned())
}

/// The message `contentType` for an attachment kind (canon-wire.md §4.4).
pub(crate) fn content_type_for(kind: &str) -> &'static str {
    match kind {
        "image" => "image",
        "audio" => "audio",
        "video" => "video",
        _ => "file",
    }
}

/// Reads a local file of at most [`MAX_UPLOAD_BYTES`]; the size is checked
/// before reading. Errors never carry the file's contents.
pub(crate) async fn read_local(path: &str) -> Result<Vec<u8>, String> {
    let path = path.strip_prefix("file://").unwrap_or(path).to_owned();
    tokio::task::spawn_blocking(move || read_local_sync(&path))
        .await
        .unwrap_or_else(|_| Err("Canon media file could not be read".to_owned()))
}

fn read_local_sync(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let size = file_size(path)?;
    if size > MAX_UPLOAD_BYTES {
        return Err(UPLOAD_LIMIT_ERROR.to_owned());
    }
    let file =
        std::fs::File::open(path).map_err(|_| "Canon media file could not be read".to_owned())?;
    let mut bytes = Vec::new();
    // One byte past the cap tells a file that grew after the check.
    file.take(MAX_UPLOAD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| "Canon media file could not be read".to_owned())?;
    if bytes.len() as u64 > MAX_UPLOAD_BYTES {
        return Err(UPLOAD_LIMIT_ERROR.to_owned());
    }
    Ok(bytes)
}

/// The size of a regular file.
fn file_size(path: &str) -> Result<u64, String> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(metadata.len()),
        _ => Err("Canon media file not found".to_owned()),
    }
}

fn transport_error(error: &TransportError) -> String {
    error.to_string()
}

/// Uploads `bytes` and returns the attachment object.
pub(crate) async fn upload(
    client: &CanonClient,
    conversation_id: &str,
    bytes: Vec<u8>,
    mime_type: &str,
    file_name: Option<String>,
) -> Result<Map<String, Value>, String> {
    client
        .upload_media(&UploadMedia {
            conversation_id: conversation_id.to_owned(),
            data: bytes,
            mime_type: mime_type.to_owned(),
            file_name,
        })
        .await
        .map_err(|e| transport_error(&e))
}

/// Uploads the hand-off file of the domain-plugin call `upload_media_for_current_conversation`
/// (runtime-control.md §7.5) and deletes it, whatever happens; the attachment Canon returned.
pub(crate) async fn upload_handoff(
    client: &CanonClient,
    conversation_id: &str,
    path: &str,
    mime_type: &str,
    file_name: Option<String>,
) -> Result<MediaPayload, String> {
    let bytes = read_local(path).await;
    remove_handoff(path);
    let bytes = bytes.map_err(|error| {
        if error == UPLOAD_LIMIT_ERROR {
            canon_host::tools::UPLOAD_TOO_LARGE.to_owned()
        } else {
            error
        }
    })?;
    if bytes.is_empty() {
        return Err(canon_host::tools::UPLOAD_NEEDS_DATA.to_owned());
    }
    let attachment = upload(client, conversation_id, bytes, mime_type, file_name).await?;
    Ok(MediaPayload {
        content_type: attachment_kind(mime_type).to_owned(),
        attachments: vec![Value::Object(attachment)],
    })
}

/// Deletes a hand-off file (one unlink; a file already gone is fine).
pub(crate) fn remove_handoff(path: &str) {
    if let Err(error) = std::fs::remove_file(path) {
        tracing::debug!(%error, "hand-off file already gone");
    }
}

/// Uploads one `adapter.send_media` item (canon-wire.md §7.4): a remote
/// image through the SSRF-guarded downloader, anything else from disk.
/// Returns the attachment and the message `contentType`. The download has
/// `download_budget` in total: a server that drips its image would otherwise
/// hold one of the few upload slots, and with them every conversation's
/// outbound media, for as long as it likes.
pub(crate) async fn upload_item(
    client: &CanonClient,
    downloader: &MediaDownloader,
    download_budget: Duration,
    conversation_id: &str,
    item: &MediaItem,
) -> Result<MediaPayload, String> {
    let remote = item
        .url
        .as_deref()
        .filter(|u| item.op == MediaOp::ImageUrl && !u.starts_with("file://"));
    let (mut attachment, remote_image) = if let Some(url) = remote {
        let downloaded = tokio::time::timeout(download_budget, downloader.download(url))
            .await
            .map_err(|_| {
                format!(
                    "downloading the image took longer than {} s; it was not sent",
                    download_budget.as_secs_f64()
                )
            })?
            .map_err(|e| transport_error(&e))?;
        let mime = downloaded
            .content_type
            .as_deref()
            .and_then(normalize_mime)
            .unwrap_or_else(|| local_mime(url_path(url), None));
        let name = basename(url_path(url)).unwrap_or_else(|| "image".to_owned());
        let bytes = downloaded.bytes.to_vec();
        if bytes.len() as u64 > MAX_UPLOAD_BYTES {
            return Err(UPLOAD_LIMIT_ERROR.to_owned());
        }
        let attachment = upload(client, conversation_id, bytes, &mime, Some(name)).await?;
        (attachment, mime.starts_with("image/"))
    } else {
        let path = item
            .path
            .as_deref()
            .or(item.url.as_deref())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| "Canon media send needs a path".to_owned())?;
        let path = path.strip_prefix("file://").unwrap_or(path);
        let bytes = read_local(path).await?;
        let mime = local_mime(path, item.mime_type.as_deref());
        let name = item
            .file_name
            .as_deref()
            .and_then(basename)
            .or_else(|| basename(path));
        let mut attachment = upload(client, conversation_id, bytes, &mime, name).await?;
        if mime.starts_with("video/") {
            attachment.insert("kind".into(), "video".into());
        }
        if let (Some(ms), true) = (item.duration_ms, mime.starts_with("audio/")) {
            attachment.insert("durationMs".into(), ms.into());
        }
        (attachment, false)
    };
    if remote_image {
        attachment.insert("kind".into(), "image".into());
    }
    let kind = attachment
        .get("kind")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| attachment_kind("application/octet-stream").to_owned());
    // `kind` is Canon's; the message type follows it.
    Ok(MediaPayload {
        content_type: content_type_for(&kind).to_owned(),
        attachments: vec![Value::Object(attachment)],
    })
}

/// Uploads the media files of a `standalone.send` in order
/// (hermes-host.md §15); the message `contentType` is the first attachment's
/// kind when it is `image`/`audio`/`video`, else `file` (always `file` with
/// `force_document`).
pub(crate) async fn upload_files(
    client: &CanonClient,
    conversation_id: &str,
    paths: &[String],
    force_document: bool,
) -> Result<MediaPayload, String> {
    // Refuse an oversized file before anything is uploaded.
    for path in paths {
        let path = path.strip_prefix("file://").unwrap_or(path);
        if file_size(path).is_ok_and(|size| size > MAX_UPLOAD_BYTES) {
            return Err(UPLOAD_LIMIT_ERROR.to_owned());
        }
    }
    let mut attachments = Vec::with_capacity(paths.len());
    for path in paths {
        let path = path.strip_prefix("file://").unwrap_or(path);
        let bytes = read_local(path).await?;
        let mime = local_mime(path, None);
        let attachment = upload(client, conversation_id, bytes, &mime, basename(path)).await?;
        attachments.push(Value::Object(attachment));
    }
    let first = attachments
        .first()
        .and_then(|a| a.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("file");
    let content_type = if force_document {
        "file"
    } else {
        content_type_for(first)
    };
    Ok(MediaPayload {
        content_type: content_type.to_owned(),
        attachments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_mime_follows_hint_then_extension_then_fallbacks() {
        assert_eq!(local_mime("/x/a.PNG", Some("Image/PNG; q=1")), "image/png");
        assert_eq!(local_mime("/x/a.png", None), "image/png");
        assert_eq!(local_mime("/x/a.m4a", None), "audio/mp4");
        assert_eq!(local_mime("/x/a.opus", None), "audio/ogg");
        assert_eq!(local_mime("/x/a.pdf", None), "application/pdf");
        assert_eq!(local_mime("/x/a", None), "application/octet-stream");
    }

    #[test]
    fn basename_and_content_type() {
        assert_eq!(basename("/a/b/report.pdf").as_deref(), Some("report.pdf"));
        assert_eq!(basename("/a/b/"), None);
        assert_eq!(content_type_for("image"), "image");
        assert_eq!(content_type_for("file"), "file");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn oversized_file_is_refused_before_reading() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.bin");
        let file = std::fs::File::create(&path).expect("create");
        file.set_len(MAX_UPLOAD_BYTES + 1).expect("sparse file");
        let error = read_local(path.to_str().expect("utf-8"))
            .await
            .expect_err("too large");
        assert_eq!(error, UPLOAD_LIMIT_ERROR);
        let missing = read_local("/nonexistent/canon-hermes-test")
            .await
            .expect_err("missing");
        assert_eq!(missing, "Canon media file not found");
    }
}
