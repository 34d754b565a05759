//! Inbound media: the pure rules of runtime-control.md §8.1–§8.3, §8.5 and
//! runtime-control.md §8.6 (canon-wire.md §5.4.2 step 9–10, §7.3).
//!
//! * [`MediaSettings`]: `CANON_INBOUND_IMAGE_DELIVERY` and
//!   `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` (or the platform extras), and the
//!   [`TrustedScope`] they select (runtime-control.md §8.1).
//! * Classification of one attachment (runtime-control.md §8.3): MIME
//!   resolution ([`resolve_mime`]), the "declares image/PDF" tests, byte
//!   signatures, [`is_image`], [`is_visual_media`],
//!   [`requires_trusted_failure`] and [`Classified`], which says whether an
//!   attachment is hidden and how it is listed for Hermes.
//! * File names: [`sanitize_file_name`] and [`derive_file_name`]
//!   (runtime-control.md §8.4's naming rule) and [`disk_file_name`] for
//!   the daemon's hand-off file.
//! * The model-facing text markers ([`markers`], [`text_with_markers`],
//!   runtime-control.md §8.5) and the Hermes `message_type` of an event with
//!   media ([`message_type`], hermes-host.md §8.5, canon-wire.md §7.3 step 4).
//!
//! * [`capture`]: the trusted capture batch and registry of
//!   runtime-control.md §8.4, which [`available_count`] reads the result of.
//!
//! Invariants: pure (no I/O, no clock, no randomness: the unique part of a
//! disk name is a parameter); total over arbitrary JSON, bytes and names,
//! never panics (proptest below).

use serde_json::Value;

use crate::protocol::MediaKind;

pub mod capture;

/// Bytes of one downloaded attachment at most (canon-wire.md §7.2).
pub const MAX_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;

/// Attachments of one message materialized at most (our number; Canon
/// allows 10 per message, canon-wire.md §7.3). Later ones are skipped and
/// count as failures.
pub const MAX_ATTACHMENTS_PER_MESSAGE: usize = 16;

/// The image-delivery environment variable (runtime-control.md §8.1).
pub const IMAGE_DELIVERY_ENV: &str = "CANON_INBOUND_IMAGE_DELIVERY";

/// The visual-media-delivery environment variable (runtime-control.md §8.1).
pub const VISUAL_MEDIA_DELIVERY_ENV: &str = "CANON_INBOUND_VISUAL_MEDIA_DELIVERY";

/// The name used when a sanitized file name is empty, `.` or `..`
/// (runtime-control.md §8.4).
pub const DEFAULT_FILE_NAME: &str = "canon-media.bin";

/// Characters of a sanitized file name at most (runtime-control.md §8.4).
pub const MAX_FILE_NAME_CHARS: usize = 255;

/// How far into the bytes `%PDF-` is looked for (runtime-control.md §8.3).
pub const PDF_SCAN_BYTES: usize = 1024;

/// The prefix of every hand-off file the daemon writes under
/// `<CANON_HOME>/tmp/` (our name; the start-up sweep deletes only these).
pub const DISK_NAME_PREFIX: &str = "canon-inbound-";

/// Bytes of a hand-off file name at most (our number, well below the usual
/// 255-byte `NAME_MAX`).
pub const MAX_DISK_NAME_BYTES: usize = 200;

/// Extensions that declare an image (runtime-control.md §8.3).
const IMAGE_EXTENSIONS: [&str; 5] = [".gif", ".jpeg", ".jpg", ".png", ".webp"];

/// One delivery setting's value (runtime-control.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delivery {
    /// Normal Hermes delivery (the default).
    #[default]
    Model,
    /// Hidden from Hermes' model-facing media path.
    TrustedOnly,
}

impl Delivery {
    /// Parses a value: trimmed, case-insensitive; empty is `model`; `None`
    /// for anything other than `model` and `trusted-only`.
    pub fn parse(raw: &str) -> Option<Delivery> {
        match py_strip(raw).to_lowercase().as_str() {
            "" | "model" => Some(Delivery::Model),
            "trusted-only" => Some(Delivery::TrustedOnly),
            _ => None,
        }
    }
}

/// A refused delivery setting. The messages are exact
/// (runtime-control.md §8.1) and refuse `adapter.connect` (non-retryable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MediaConfigError {
    /// `CANON_INBOUND_IMAGE_DELIVERY` (or its extra) is invalid.
    #[error("CANON_INBOUND_IMAGE_DELIVERY must be 'model' or 'trusted-only'")]
    InvalidImageDelivery,
    /// `CANON_INBOUND_VISUAL_MEDIA_DELIVERY` (or its extra) is invalid.
    #[error("CANON_INBOUND_VISUAL_MEDIA_DELIVERY must be 'model' or 'trusted-only'")]
    InvalidVisualMediaDelivery,
}

/// Which attachments are hidden from Hermes' model-facing media path
/// (runtime-control.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrustedScope {
    /// Nothing is hidden.
    #[default]
    None,
    /// Images are hidden.
    Image,
    /// Images and PDFs are hidden.
    Visual,
}

impl TrustedScope {
    /// Marker subject (singular, plural) and pipeline
    /// (runtime-control.md §8.5); `None` without a trusted scope.
    fn marker_words(self) -> Option<(&'static str, &'static str, &'static str)> {
        match self {
            TrustedScope::None => None,
            TrustedScope::Image => Some((
                "image attachment",
                "image attachments",
                "the model's general vision pipeline",
            )),
            TrustedScope::Visual => Some((
                "visual attachment",
                "visual attachments",
                "Hermes' general vision/document pipeline",
            )),
        }
    }
}

/// Both delivery settings (runtime-control.md §8.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MediaSettings {
    /// Image delivery.
    pub image: Delivery,
    /// Visual-media delivery.
    pub visual_media: Delivery,
}

impl MediaSettings {
    /// Resolves both settings: the environment value (the binary passes it,
    /// `None` when unset or blank) wins over the platform extra, which is
    /// looked up under `inbound_image_delivery`, then the lower-case env
    /// name, then the env name (likewise for visual media). An extra that is
    /// present but not a string (a number, a boolean) is refused like an
    /// invalid string. The image setting is checked first.
    pub fn resolve(
        image_env: Option<&str>,
        visual_env: Option<&str>,
        extra: &Value,
    ) -> Result<MediaSettings, MediaConfigError> {
        let image = setting(
            image_env,
            extra,
            [
                "inbound_image_delivery",
                "canon_inbound_image_delivery",
                IMAGE_DELIVERY_ENV,
            ],
        )
        .ok_or(MediaConfigError::InvalidImageDelivery)?;
        let visual_media = setting(
            visual_env,
            extra,
            [
                "inbound_visual_media_delivery",
                "canon_inbound_visual_media_delivery",
                VISUAL_MEDIA_DELIVERY_ENV,
            ],
        )
        .ok_or(MediaConfigError::InvalidVisualMediaDelivery)?;
        Ok(MediaSettings {
            image,
            visual_media,
        })
    }

    /// The trusted scope: `visual` wins over `image` (runtime-control.md §8.1).
    pub fn scope(self) -> TrustedScope {
        if self.visual_media == Delivery::TrustedOnly {
            TrustedScope::Visual
        } else if self.image == Delivery::TrustedOnly {
            TrustedScope::Image
        } else {
            TrustedScope::None
        }
    }
}

/// One setting from the environment value or the first extra key present;
/// `None` when the value is invalid.
fn setting(env: Option<&str>, extra: &Value, keys: [&str; 3]) -> Option<Delivery> {
    if let Some(env) = env.filter(|v| !py_strip(v).is_empty()) {
        return Delivery::parse(env);
    }
    let value = keys
        .iter()
        .find_map(|key| extra.get(*key).filter(|v| !v.is_null()));
    match value {
        None => Some(Delivery::Model),
        Some(Value::String(raw)) => Delivery::parse(raw),
        Some(_) => None,
    }
}

/// Python's `str.strip()` whitespace set: Unicode whitespace plus
/// U+001C..U+001F.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// A MIME type without parameters, trimmed and lower-cased; `None` when
/// nothing is left.
pub fn normalize_mime(raw: &str) -> Option<String> {
    let base = raw.split(';').next().unwrap_or_default();
    let mime = py_strip(base).to_lowercase();
    (!mime.is_empty()).then_some(mime)
}

/// A non-empty string field of an attachment.
fn field<'a>(attachment: &'a Value, key: &str) -> Option<&'a str> {
    attachment
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The attachment's `url`, when it is a non-blank string (runtime-control.md §8.3 step 1).
pub fn attachment_url(attachment: &Value) -> Option<&str> {
    field(attachment, "url").filter(|u| !py_strip(u).is_empty())
}

/// The attachment's declared `mimeType`, normalized.
pub fn declared_mime(attachment: &Value) -> Option<String> {
    field(attachment, "mimeType").and_then(normalize_mime)
}

/// The path of a URL without scheme, authority, query or fragment.
pub fn url_path(url: &str) -> &str {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    match url.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]),
        None => url,
    }
}

/// Python's `os.path.splitext(name)[1]` (POSIX), lower-cased: the last
/// `.suffix` of the last `/` segment, unless the segment's dots are all
/// leading (`.png` has no extension).
pub fn extension(name: &str) -> Option<String> {
    let leaf = name.rsplit('/').next().unwrap_or_default();
    let dot = leaf.rfind('.')?;
    if leaf[..dot].chars().all(|c| c == '.') {
        return None;
    }
    Some(leaf[dot..].to_lowercase())
}

/// The extension the "declares" tests use: of `fileName`, else of the URL
/// path (runtime-control.md §8.3).
fn declared_extension(attachment: &Value) -> Option<String> {
    match field(attachment, "fileName") {
        Some(name) => extension(name),
        None => attachment_url(attachment).and_then(|u| extension(url_path(u))),
    }
}

/// `mimeType` starts with `image/`, or `kind` is `image`, or the extension
/// is an image extension (runtime-control.md §8.3 "declares image").
pub fn declares_image(attachment: &Value) -> bool {
    declared_mime(attachment).is_some_and(|m| m.starts_with("image/"))
        || field(attachment, "kind").is_some_and(|k| py_strip(k).to_lowercase() == "image")
        || declared_extension(attachment).is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str()))
}

/// `mimeType` is `application/pdf`, or the extension is `.pdf`
/// (runtime-control.md §8.3 "declares PDF").
pub fn declares_pdf(attachment: &Value) -> bool {
    declared_mime(attachment).is_some_and(|m| m == "application/pdf")
        || declared_extension(attachment).is_some_and(|e| e == ".pdf")
}

/// The bytes start with a JPEG, PNG, GIF, TIFF, BMP or RIFF…WEBP signature
/// (runtime-control.md §8.3).
pub fn bytes_declare_image(bytes: &[u8]) -> bool {
    const PREFIXES: [&[u8]; 7] = [
        b"\xFF\xD8\xFF",
        b"\x89PNG\r\n\x1a\n",
        b"GIF87a",
        b"GIF89a",
        b"II*\0",
        b"MM\0*",
        b"BM",
    ];
    PREFIXES.iter().any(|p| bytes.starts_with(p))
        || (bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP".as_slice()))
}

/// `%PDF-` occurs in the first [`PDF_SCAN_BYTES`] bytes (runtime-control.md §8.3).
pub fn bytes_declare_pdf(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(PDF_SCAN_BYTES)];
    head.windows(5).any(|w| w == b"%PDF-")
}

/// The MIME type of a few common extensions (our fixed table, in the spirit
/// of Python's `mimetypes.guess_type`, which depends on the host).
pub fn mime_for_extension(extension: &str) -> Option<&'static str> {
    Some(match extension {
        ".png" => "image/png",
        ".jpg" | ".jpeg" | ".jpe" => "image/jpeg",
        ".gif" => "image/gif",
        ".webp" => "image/webp",
        ".bmp" => "image/bmp",
        ".tif" | ".tiff" => "image/tiff",
        ".svg" => "image/svg+xml",
        ".heic" => "image/heic",
        ".pdf" => "application/pdf",
        ".txt" => "text/plain",
        ".md" => "text/markdown",
        ".csv" => "text/csv",
        ".htm" | ".html" => "text/html",
        ".json" => "application/json",
        ".xml" => "text/xml",
        ".zip" => "application/zip",
        ".doc" => "application/msword",
        ".docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ".xls" => "application/vnd.ms-excel",
        ".xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        ".ppt" => "application/vnd.ms-powerpoint",
        ".pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        ".mp3" => "audio/mpeg",
        ".m4a" => "audio/mp4",
        ".ogg" | ".opus" => "audio/ogg",
        ".wav" => "audio/x-wav",
        ".flac" => "audio/flac",
        ".aac" => "audio/aac",
        ".mp4" => "video/mp4",
        ".mov" => "video/quicktime",
        ".webm" => "video/webm",
        ".avi" => "video/x-msvideo",
        ".mkv" => "video/x-matroska",
        ".3gp" => "video/3gpp",
        _ => return None,
    })
}

/// The standard extension of a MIME type (Python's
/// `mimetypes.guess_extension` for the common types), with the dot.
pub fn extension_for_mime(mime: &str) -> Option<&'static str> {
    Some(match mime {
        "image/png" => ".png",
        "image/jpeg" => ".jpg",
        "image/gif" => ".gif",
        "image/webp" => ".webp",
        "image/bmp" => ".bmp",
        "image/tiff" => ".tiff",
        "image/svg+xml" => ".svg",
        "application/pdf" => ".pdf",
        "text/plain" => ".txt",
        "text/markdown" => ".md",
        "text/csv" => ".csv",
        "text/html" => ".html",
        "application/json" => ".json",
        "application/zip" => ".zip",
        "audio/mpeg" => ".mp3",
        "audio/mp4" => ".m4a",
        "audio/ogg" => ".ogg",
        "audio/wav" | "audio/x-wav" => ".wav",
        "audio/flac" => ".flac",
        "video/mp4" => ".mp4",
        "video/quicktime" => ".mov",
        "video/webm" => ".webm",
        _ => return None,
    })
}

/// runtime-control.md §8.3 step 3: the attachment's `mimeType`, else the
/// response `Content-Type`, else a guess from the `fileName` extension, else
/// from the URL's extension; all normalized.
pub fn resolve_mime(attachment: &Value, response_mime: Option<&str>) -> Option<String> {
    declared_mime(attachment)
        .or_else(|| response_mime.and_then(normalize_mime))
        .or_else(|| {
            let from_name = field(attachment, "fileName").and_then(extension);
            let from_url = || attachment_url(attachment).and_then(|u| extension(url_path(u)));
            from_name
                .and_then(|e| mime_for_extension(&e))
                .or_else(|| from_url().and_then(|e| mime_for_extension(&e)))
                .map(str::to_owned)
        })
}

/// runtime-control.md §8.3 "is image": the resolved or response MIME is `image/*`,
/// or the attachment declares an image, or the bytes carry an image signature.
pub fn is_image(
    attachment: &Value,
    resolved_mime: Option<&str>,
    response_mime: Option<&str>,
    bytes: &[u8],
) -> bool {
    let image = |m: Option<&str>| m.is_some_and(|m| m.starts_with("image/"));
    image(resolved_mime)
        || image(response_mime.and_then(normalize_mime).as_deref())
        || declares_image(attachment)
        || bytes_declare_image(bytes)
}

/// runtime-control.md §8.3 "is visual media": an image, or a PDF by
/// MIME, declaration or `%PDF-` in the first 1,024 bytes.
pub fn is_visual_media(
    attachment: &Value,
    resolved_mime: Option<&str>,
    response_mime: Option<&str>,
    bytes: &[u8],
) -> bool {
    let pdf = |m: Option<&str>| m == Some("application/pdf");
    is_image(attachment, resolved_mime, response_mime, bytes)
        || pdf(resolved_mime)
        || pdf(response_mime.and_then(normalize_mime).as_deref())
        || declares_pdf(attachment)
        || bytes_declare_pdf(bytes)
}

/// runtime-control.md §8.3 "requires trusted failure": whether an
/// attachment that is malformed, has no URL, or failed to download or be
/// handed off counts as unavailable. Scope `visual`: always (even audio,
/// video and other files, which then also count in the "visual
/// attachment(s) … withheld" marker, \[parity\]); scope `image`: when it is
/// an object that declares an image; no scope: never.
pub fn requires_trusted_failure(scope: TrustedScope, attachment: &Value) -> bool {
    match scope {
        TrustedScope::None => false,
        TrustedScope::Image => attachment.is_object() && declares_image(attachment),
        TrustedScope::Visual => true,
    }
}

/// The Hermes media kind of a MIME type, by family (runtime-control.md §8.3 step 5).
pub fn kind_for_mime(mime: &str) -> MediaKind {
    if mime.starts_with("image/") {
        MediaKind::Image
    } else if mime.starts_with("audio/") {
        MediaKind::Audio
    } else if mime.starts_with("video/") {
        MediaKind::Video
    } else {
        MediaKind::Document
    }
}

/// The MIME type reported when none could be resolved.
pub const FALLBACK_MIME: &str = "application/octet-stream";

/// A downloaded attachment, classified (runtime-control.md §8.3 steps 3–5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// The resolved MIME type, or [`FALLBACK_MIME`].
    pub mime_type: String,
    /// Hidden from Hermes' model-facing media path (never written, never
    /// listed).
    pub hidden: bool,
    /// The kind it is listed under when not hidden.
    pub kind: MediaKind,
    /// The sanitized file name (runtime-control.md §8.4).
    pub file_name: String,
}

/// Classifies one downloaded attachment under a scope.
pub fn classify(
    scope: TrustedScope,
    attachment: &Value,
    response_mime: Option<&str>,
    bytes: &[u8],
) -> Classified {
    let resolved = resolve_mime(attachment, response_mime);
    let hidden = match scope {
        TrustedScope::None => false,
        TrustedScope::Image => is_image(attachment, resolved.as_deref(), response_mime, bytes),
        TrustedScope::Visual => {
            is_visual_media(attachment, resolved.as_deref(), response_mime, bytes)
        }
    };
    let file_name = derive_file_name(attachment, resolved.as_deref());
    let mime_type = resolved.unwrap_or_else(|| FALLBACK_MIME.to_owned());
    Classified {
        kind: kind_for_mime(&mime_type),
        mime_type,
        hidden,
        file_name,
    }
}

/// runtime-control.md §8.4 file-name sanitizing: `\` becomes `/`, the last
/// segment is kept, control characters are removed, the rest is trimmed and
/// cut to 255 characters; empty, `.` or `..` become [`DEFAULT_FILE_NAME`].
pub fn sanitize_file_name(raw: &str) -> String {
    let slashed = raw.replace('\\', "/");
    let leaf = slashed.rsplit('/').next().unwrap_or_default();
    let clean: String = leaf.chars().filter(|c| !c.is_control()).collect();
    let cut: String = py_strip(&clean).chars().take(MAX_FILE_NAME_CHARS).collect();
    if cut.is_empty() || cut == "." || cut == ".." {
        DEFAULT_FILE_NAME.to_owned()
    } else {
        cut
    }
}

/// The name of an attachment (runtime-control.md §8.4): its `fileName`, else
/// the URL's last path segment when it contains a dot, else `canon-media`
/// plus the MIME type's standard extension or `.bin`; then sanitized.
pub fn derive_file_name(attachment: &Value, mime: Option<&str>) -> String {
    if let Some(name) = field(attachment, "fileName") {
        return sanitize_file_name(name);
    }
    let segment = attachment_url(attachment)
        .map(|u| url_path(u).rsplit('/').next().unwrap_or_default())
        .filter(|s| s.contains('.'));
    match segment {
        Some(segment) => sanitize_file_name(segment),
        None => {
            let ext = mime.and_then(extension_for_mime).unwrap_or(".bin");
            sanitize_file_name(&format!("canon-media{ext}"))
        }
    }
}

/// The hand-off file's name under `<CANON_HOME>/tmp/`:
/// `canon-inbound-<unique>-<name>`, at most [`MAX_DISK_NAME_BYTES`] bytes.
/// A long name keeps its extension (when it has a short one) and loses the
/// end of its stem; cuts fall on character boundaries. `unique` should be
/// short ASCII (hex); a `/` in either part is replaced.
pub fn disk_file_name(unique: &str, name: &str) -> String {
    let prefix = format!("{DISK_NAME_PREFIX}{unique}-").replace('/', "_");
    let name = sanitize_file_name(name);
    let budget = MAX_DISK_NAME_BYTES.saturating_sub(prefix.len());
    if name.len() <= budget {
        return format!("{prefix}{name}");
    }
    let ext = extension(&name).filter(|e| e.len() <= 16 && e.len() < budget);
    let ext_len = ext.as_ref().map_or(0, |e| e.len());
    let stem_budget = budget - ext_len;
    let mut stem = String::new();
    for c in name.chars() {
        if stem.len() + c.len_utf8() > stem_budget {
            break;
        }
        stem.push(c);
    }
    format!("{prefix}{stem}{}", ext.unwrap_or_default())
}

/// The Hermes `message_type` of an event with these listed media: audio
/// (4) > video (3) > photo (2) > document (1) (canon-wire.md §7.3 step 4);
/// `None` without media. Audio is reported as `audio` rather than `voice`:
/// Hermes transcribes both alike, and `voice` could turn on a spoken reply
/// the sender never asked for.
pub fn message_type(kinds: impl IntoIterator<Item = MediaKind>) -> Option<&'static str> {
    let rank = |k: MediaKind| match k {
        MediaKind::Audio => (4, "audio"),
        MediaKind::Video => (3, "video"),
        MediaKind::Image => (2, "photo"),
        MediaKind::Document => (1, "document"),
    };
    kinds
        .into_iter()
        .map(rank)
        .max_by_key(|(r, _)| *r)
        .map(|(_, name)| name)
}

/// What happened to a message's attachments (runtime-control.md §8.5's inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MediaCounts {
    /// Hidden attachments successfully downloaded.
    pub hidden: usize,
    /// Attachments counted unavailable (runtime-control.md §8.3 "requires trusted failure").
    pub unavailable: usize,
}

/// runtime-control.md §8.5 `available`: `hidden`, unless the batch
/// overflowed or registration returned false (then 0). With `available = 0`
/// the formula gives `withheld = unavailable + hidden`: hidden attachments
/// no trusted tool can read are reported to the model as withheld ("ask the
/// user to resend"), never as available.
pub fn available_count(hidden: usize, overflowed: bool, registered: bool) -> usize {
    if overflowed || !registered {
        0
    } else {
        hidden
    }
}

/// The runtime-control.md §8.5 markers joined with `\n`, or `None` when
/// `hidden` and `unavailable` are both 0 or no trusted scope is active.
pub fn markers(scope: TrustedScope, counts: MediaCounts, available: usize) -> Option<String> {
    if counts.hidden == 0 && counts.unavailable == 0 {
        return None;
    }
    let (singular, plural, pipeline) = scope.marker_words()?;
    let available = available.min(counts.hidden);
    let withheld = counts.unavailable + counts.hidden - available;
    let subject = |n: usize| if n == 1 { singular } else { plural };
    let mut lines = Vec::new();
    if available > 0 {
        let verb = if available == 1 { "is" } else { "are" };
        lines.push(format!(
            "[{available} {} {verb} available to trusted Canon tools and not sent to {pipeline}.]",
            subject(available)
        ));
    }
    if withheld > 0 {
        let verb = if withheld == 1 { "was" } else { "were" };
        lines.push(format!(
            "[{withheld} {} {verb} withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]",
            subject(withheld)
        ));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// runtime-control.md §8.5: the turn text with markers. With a non-blank
/// caption (`text`) or a `contact_card` message the markers follow the original
/// text after a blank line; otherwise they replace the attachment-label
/// fallback entirely, so no attachment metadata, path or URL reaches the model.
pub fn text_with_markers(original: &str, message: &Value, markers: &str) -> String {
    let caption = message
        .get("text")
        .and_then(Value::as_str)
        .is_some_and(|t| !py_strip(t).is_empty());
    let contact_card = message.get("contentType").and_then(Value::as_str) == Some("contact_card");
    if caption || contact_card {
        format!("{original}\n\n{markers}")
    } else {
        markers.to_owned()
    }
}

/// The final turn text of a woken message after materialization
/// (runtime-control.md §8.5): unchanged when no marker applies.
pub fn final_text(
    original: &str,
    message: &Value,
    scope: TrustedScope,
    counts: MediaCounts,
    available: usize,
) -> String {
    match markers(scope, counts, available) {
        Some(markers) => text_with_markers(original, message, &markers),
        None => original.to_owned(),
    }
}

/// The counts when nothing can be downloaded (no live Canon client, or the
/// materialization failed as a whole): every attachment that requires
/// trusted failure is unavailable (runtime-control.md §8.3 first paragraph).
pub fn all_unavailable(scope: TrustedScope, attachments: &[Value]) -> MediaCounts {
    MediaCounts {
        hidden: 0,
        unavailable: attachments
            .iter()
            .filter(|a| requires_trusted_failure(scope, a))
            .count(),
    }
}

#[cfg(test)]
mod tests;
