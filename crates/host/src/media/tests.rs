//! Tests of the pure inbound-media rules (runtime-control.md §8.1–§8.3, §8.5).

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
const PDF: &[u8] = b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n";

fn resolve(
    image: Option<&str>,
    visual: Option<&str>,
    extra: Value,
) -> Result<TrustedScope, String> {
    MediaSettings::resolve(image, visual, &extra)
        .map(MediaSettings::scope)
        .map_err(|e| e.to_string())
}

#[test]
fn delivery_values_are_trimmed_and_case_insensitive() {
    for (raw, expected) in [
        ("", Some(Delivery::Model)),
        ("  ", Some(Delivery::Model)),
        ("model", Some(Delivery::Model)),
        (" MODEL\n", Some(Delivery::Model)),
        ("trusted-only", Some(Delivery::TrustedOnly)),
        ("\tTrusted-Only ", Some(Delivery::TrustedOnly)),
        ("trusted_only", None),
        ("trusted", None),
        ("true", None),
    ] {
        assert_eq!(Delivery::parse(raw), expected, "{raw:?}");
    }
}

#[test]
fn scope_follows_the_settings_and_visual_wins() {
    assert_eq!(resolve(None, None, json!({})), Ok(TrustedScope::None));
    assert_eq!(
        resolve(Some("trusted-only"), None, json!({})),
        Ok(TrustedScope::Image)
    );
    assert_eq!(
        resolve(None, Some("trusted-only"), json!({})),
        Ok(TrustedScope::Visual)
    );
    assert_eq!(
        resolve(Some("trusted-only"), Some("trusted-only"), json!(null)),
        Ok(TrustedScope::Visual)
    );
}

#[test]
fn environment_wins_over_the_platform_extra() {
    let extra = json!({"inbound_image_delivery": "trusted-only"});
    assert_eq!(
        resolve(Some("model"), None, extra.clone()),
        Ok(TrustedScope::None)
    );
    assert_eq!(resolve(None, None, extra.clone()), Ok(TrustedScope::Image));
    // A blank environment value counts as unset.
    assert_eq!(resolve(Some(" "), None, extra), Ok(TrustedScope::Image));
    // An invalid environment value is refused even when the extra is fine.
    assert_eq!(
        resolve(
            None,
            Some("nope"),
            json!({"inbound_visual_media_delivery": "model"})
        ),
        Err("CANON_INBOUND_VISUAL_MEDIA_DELIVERY must be 'model' or 'trusted-only'".to_owned())
    );
}

#[test]
fn extras_are_read_under_three_names_in_order() {
    for key in [
        "inbound_visual_media_delivery",
        "canon_inbound_visual_media_delivery",
        "CANON_INBOUND_VISUAL_MEDIA_DELIVERY",
    ] {
        let extra = json!({ key: "Trusted-Only" });
        assert_eq!(
            resolve(None, None, extra),
            Ok(TrustedScope::Visual),
            "{key}"
        );
    }
    let both = json!({"inbound_image_delivery": "model", "CANON_INBOUND_IMAGE_DELIVERY": "bad"});
    assert_eq!(resolve(None, None, both), Ok(TrustedScope::None));
    let null_first =
        json!({"inbound_image_delivery": null, "canon_inbound_image_delivery": "trusted-only"});
    assert_eq!(resolve(None, None, null_first), Ok(TrustedScope::Image));
}

#[test]
fn invalid_values_are_refused_with_the_exact_messages() {
    let image = "CANON_INBOUND_IMAGE_DELIVERY must be 'model' or 'trusted-only'";
    assert_eq!(resolve(Some("yes"), None, json!({})), Err(image.to_owned()));
    assert_eq!(
        resolve(None, None, json!({"inbound_image_delivery": true})),
        Err(image.to_owned())
    );
    assert_eq!(
        resolve(None, None, json!({"inbound_image_delivery": 1})),
        Err(image.to_owned())
    );
    // The image setting is checked first.
    assert_eq!(
        resolve(Some("x"), Some("y"), json!({})),
        Err(image.to_owned())
    );
}

#[test]
fn mime_types_lose_parameters_and_case() {
    assert_eq!(
        normalize_mime(" Image/PNG ; charset=x").as_deref(),
        Some("image/png")
    );
    assert_eq!(
        normalize_mime("application/pdf").as_deref(),
        Some("application/pdf")
    );
    assert_eq!(normalize_mime(" ; a=b"), None);
    assert_eq!(normalize_mime(""), None);
}

#[test]
fn extensions_follow_python_splitext() {
    for (name, expected) in [
        ("photo.PNG", Some(".png")),
        ("a.tar.gz", Some(".gz")),
        (".png", None),
        ("..png", None),
        ("dir.x/file", None),
        ("/files/a/b/c.jpeg", Some(".jpeg")),
        ("noext", None),
        ("trailing.", Some(".")),
        ("", None),
    ] {
        assert_eq!(extension(name).as_deref(), expected, "{name:?}");
    }
}

#[test]
fn url_paths_drop_scheme_host_query_and_fragment() {
    assert_eq!(
        url_path("https://h.example/files/a/b.png?token=t#x"),
        "/files/a/b.png"
    );
    assert_eq!(url_path("http://h.example"), "");
    assert_eq!(url_path("relative/c.pdf?x"), "relative/c.pdf");
}

#[test]
fn byte_signatures_are_recognized() {
    for image in [
        &b"\xFF\xD8\xFF\xE0rest"[..],
        PNG,
        b"GIF87a..",
        b"GIF89a..",
        b"II*\0....",
        b"MM\0*....",
        b"BM......",
        b"RIFF\x10\0\0\0WEBPVP8 ",
    ] {
        assert!(bytes_declare_image(image), "{image:?}");
    }
    for other in [
        &b""[..],
        b"\xFF\xD8",
        b"\x89PNG\r\n\x1a",
        b"GIF88a",
        b"RIFF\x10\0\0\0WAVEfmt ",
        b"RIFF",
        PDF,
    ] {
        assert!(!bytes_declare_image(other), "{other:?}");
    }
}

#[test]
fn pdf_marker_counts_only_in_the_first_kilobyte() {
    assert!(bytes_declare_pdf(PDF));
    let mut late = vec![b' '; 1019];
    late.extend_from_slice(b"%PDF-");
    assert_eq!(late.len(), 1024);
    assert!(bytes_declare_pdf(&late));
    let mut too_late = vec![b' '; 1020];
    too_late.extend_from_slice(b"%PDF-");
    assert!(!bytes_declare_pdf(&too_late));
    assert!(!bytes_declare_pdf(b"%PDF"));
}

#[test]
fn declarations_read_mime_kind_and_extension() {
    let check = |attachment: Value, image: bool, pdf: bool| {
        assert_eq!(declares_image(&attachment), image, "image {attachment}");
        assert_eq!(declares_pdf(&attachment), pdf, "pdf {attachment}");
    };
    check(json!({"mimeType": "IMAGE/heic"}), true, false);
    check(json!({"kind": " Image "}), true, false);
    check(json!({"fileName": "scan.WEBP"}), true, false);
    check(json!({"fileName": "scan.bmp"}), false, false);
    check(
        json!({"url": "https://h/x/photo.jpg?token=a.pdf"}),
        true,
        false,
    );
    // The URL is only consulted without a file name.
    check(
        json!({"fileName": "notes", "url": "https://h/x/photo.jpg"}),
        false,
        false,
    );
    check(json!({"mimeType": "application/pdf; q=1"}), false, true);
    check(
        json!({"fileName": "Report.PDF", "kind": "file"}),
        false,
        true,
    );
    check(json!("not an object"), false, false);
    check(
        json!({"mimeType": 7, "kind": ["image"], "fileName": null}),
        false,
        false,
    );
}

#[test]
fn mime_resolution_prefers_declared_then_response_then_guess() {
    let check = |attachment: Value, response: Option<&str>, expected: Option<&str>| {
        assert_eq!(
            resolve_mime(&attachment, response).as_deref(),
            expected,
            "{attachment} {response:?}"
        );
    };
    check(
        json!({"mimeType": "Image/PNG; x=1"}),
        Some("text/plain"),
        Some("image/png"),
    );
    check(
        json!({"fileName": "a.pdf"}),
        Some("Text/Plain; charset=utf-8"),
        Some("text/plain"),
    );
    check(json!({"fileName": "a.pdf"}), None, Some("application/pdf"));
    check(
        json!({"fileName": "a", "url": "https://h/b.mp3?t=1"}),
        None,
        Some("audio/mpeg"),
    );
    check(json!({"url": "https://h/b"}), Some(" "), None);
}

#[test]
fn classification_hides_by_scope() {
    let png = json!({"kind": "image", "mimeType": "image/png", "fileName": "a.png", "url": "u"});
    let pdf =
        json!({"kind": "file", "mimeType": "application/pdf", "fileName": "b.pdf", "url": "u"});
    let audio = json!({"kind": "audio", "mimeType": "audio/ogg", "fileName": "c.ogg", "url": "u"});
    let hidden = |scope, a: &Value, bytes: &[u8]| classify(scope, a, None, bytes).hidden;
    assert!(!hidden(TrustedScope::None, &png, PNG));
    assert!(hidden(TrustedScope::Image, &png, PNG));
    assert!(!hidden(TrustedScope::Image, &pdf, PDF));
    assert!(hidden(TrustedScope::Visual, &pdf, PDF));
    assert!(hidden(TrustedScope::Visual, &png, PNG));
    assert!(!hidden(TrustedScope::Visual, &audio, b"OggS"));
    // Undeclared bytes still count: a PNG posing as a document.
    let disguised = json!({"kind": "file", "mimeType": "application/octet-stream", "fileName": "x.bin", "url": "u"});
    assert!(hidden(TrustedScope::Image, &disguised, PNG));
    assert!(hidden(TrustedScope::Visual, &disguised, PDF));
    assert!(!hidden(TrustedScope::Image, &disguised, PDF));
    // The response MIME counts too.
    let bare = json!({"url": "u"});
    assert!(classify(TrustedScope::Image, &bare, Some("image/gif"), b"").hidden);
    assert!(classify(TrustedScope::Visual, &bare, Some("application/pdf"), b"").hidden);
}

#[test]
fn classification_lists_by_mime_family() {
    let check =
        |attachment: Value, response: Option<&str>, mime: &str, kind: MediaKind, name: &str| {
            let c = classify(TrustedScope::None, &attachment, response, b"data");
            assert_eq!(
                (c.mime_type.as_str(), c.kind, c.file_name.as_str(), c.hidden),
                (mime, kind, name, false),
                "{attachment}"
            );
        };
    check(
        json!({"mimeType": "image/png", "fileName": "a.png"}),
        None,
        "image/png",
        MediaKind::Image,
        "a.png",
    );
    check(
        json!({"mimeType": "application/pdf", "fileName": "dir\\b.pdf"}),
        None,
        "application/pdf",
        MediaKind::Document,
        "b.pdf",
    );
    check(
        json!({"url": "https://h/f/v.mp4?t=1"}),
        None,
        "video/mp4",
        MediaKind::Video,
        "v.mp4",
    );
    check(
        json!({"url": "https://h/f/voice"}),
        Some("audio/ogg"),
        "audio/ogg",
        MediaKind::Audio,
        "canon-media.ogg",
    );
    check(
        json!({"url": "https://h/f/blob"}),
        None,
        FALLBACK_MIME,
        MediaKind::Document,
        "canon-media.bin",
    );
}

#[test]
fn trusted_failure_rule_by_scope() {
    let image = json!({"kind": "image"});
    let audio = json!({"kind": "audio", "url": "u"});
    assert!(!requires_trusted_failure(TrustedScope::None, &image));
    assert!(requires_trusted_failure(TrustedScope::Image, &image));
    assert!(!requires_trusted_failure(TrustedScope::Image, &audio));
    assert!(!requires_trusted_failure(
        TrustedScope::Image,
        &json!("x.png")
    ));
    assert!(requires_trusted_failure(TrustedScope::Visual, &audio));
    assert!(requires_trusted_failure(TrustedScope::Visual, &json!(3)));
    let attachments = [image, audio, json!(null)];
    assert_eq!(
        all_unavailable(TrustedScope::Image, &attachments).unavailable,
        1
    );
    assert_eq!(
        all_unavailable(TrustedScope::Visual, &attachments).unavailable,
        3
    );
    assert_eq!(
        all_unavailable(TrustedScope::None, &attachments).unavailable,
        0
    );
}

#[test]
fn file_names_are_sanitized() {
    for (raw, expected) in [
        ("photo.png", "photo.png"),
        ("C:\\Users\\me\\scan.pdf", "scan.pdf"),
        ("../../etc/passwd", "passwd"),
        ("a/b/", DEFAULT_FILE_NAME),
        ("  spaced name.txt \n", "spaced name.txt"),
        ("bell\u{7}\u{0}name\u{7f}.txt", "bellname.txt"),
        (".", DEFAULT_FILE_NAME),
        ("dir/..", DEFAULT_FILE_NAME),
        ("", DEFAULT_FILE_NAME),
        (" \t ", DEFAULT_FILE_NAME),
    ] {
        assert_eq!(sanitize_file_name(raw), expected, "{raw:?}");
    }
    let long = "é".repeat(300);
    assert_eq!(sanitize_file_name(&long).chars().count(), 255);
}

#[test]
fn derived_names_fall_back_to_the_url_and_the_mime_type() {
    let check = |attachment: Value, mime: Option<&str>, expected: &str| {
        assert_eq!(
            derive_file_name(&attachment, mime),
            expected,
            "{attachment}"
        );
    };
    check(
        json!({"fileName": "x/y.png", "url": "https://h/a.jpg"}),
        None,
        "y.png",
    );
    check(
        json!({"url": "https://h/files/c/d/e.jpg?token=t"}),
        None,
        "e.jpg",
    );
    check(
        json!({"url": "https://h/files/c/d/e?token=t.x"}),
        Some("image/png"),
        "canon-media.png",
    );
    check(
        json!({"url": "https://h/files/e"}),
        Some("application/x-unknown"),
        "canon-media.bin",
    );
    check(json!({}), None, "canon-media.bin");
}

#[test]
fn disk_names_are_bounded_and_keep_the_extension() {
    assert_eq!(disk_file_name("00ff", "a.png"), "canon-inbound-00ff-a.png");
    let long = format!("{}.pdf", "ü".repeat(200));
    let name = disk_file_name("abcd", &long);
    assert!(name.len() <= MAX_DISK_NAME_BYTES, "{}", name.len());
    assert!(name.starts_with("canon-inbound-abcd-ü"));
    assert!(name.ends_with("ü.pdf"), "{name}");
    let no_ext = "x".repeat(400);
    assert_eq!(disk_file_name("1", &no_ext).len(), MAX_DISK_NAME_BYTES);
    assert_eq!(disk_file_name("a/b", "c"), "canon-inbound-a_b-c");
}

#[test]
fn message_type_follows_the_priority() {
    use MediaKind::*;
    assert_eq!(message_type([]), None);
    assert_eq!(message_type([Document]), Some("document"));
    assert_eq!(message_type([Document, Image]), Some("photo"));
    assert_eq!(message_type([Image, Video, Document]), Some("video"));
    assert_eq!(message_type([Video, Audio, Image]), Some("audio"));
}

#[test]
fn markers_are_exact() {
    let counts = |hidden, unavailable| MediaCounts {
        hidden,
        unavailable,
    };
    assert_eq!(
        markers(TrustedScope::Image, counts(1, 0), 1).as_deref(),
        Some("[1 image attachment is available to trusted Canon tools and not sent to the model's general vision pipeline.]")
    );
    assert_eq!(
        markers(TrustedScope::Visual, counts(2, 1), 2).as_deref(),
        Some("[2 visual attachments are available to trusted Canon tools and not sent to Hermes' general vision/document pipeline.]\n[1 visual attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]")
    );
    // Without a registry nothing is available: everything is withheld.
    assert_eq!(
        markers(TrustedScope::Image, counts(1, 0), available_count(1, false, false)).as_deref(),
        Some("[1 image attachment was withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]")
    );
    assert_eq!(
        markers(TrustedScope::Visual, counts(2, 1), 0).as_deref(),
        Some("[3 visual attachments were withheld because trusted delivery failed or exceeded its bounds; ask the user to resend the message.]")
    );
    assert_eq!(markers(TrustedScope::Image, counts(0, 0), 0), None);
    assert_eq!(markers(TrustedScope::None, counts(1, 1), 1), None);
    assert_eq!(available_count(2, false, true), 2);
    assert_eq!(available_count(2, true, true), 0);
}

#[test]
fn markers_follow_a_caption_or_replace_the_labels() {
    let marker = "[m]";
    let check = |message: Value, original: &str, expected: &str| {
        assert_eq!(
            text_with_markers(original, &message, marker),
            expected,
            "{message}"
        );
    };
    check(
        json!({"text": "look", "contentType": "image"}),
        "look",
        "look\n\n[m]",
    );
    check(
        json!({"text": "  ", "contentType": "image"}),
        "[image attachment: a.png]",
        "[m]",
    );
    check(
        json!({"contentType": "file"}),
        "[file attachment: b.pdf]",
        "[m]",
    );
    check(
        json!({"contentType": "contact_card", "contactCard": {}}),
        "[Contact card] \"Ann\"",
        "[Contact card] \"Ann\"\n\n[m]",
    );
    let message = json!({"contentType": "image"});
    assert_eq!(
        final_text(
            "[image attachment: a.png]",
            &message,
            TrustedScope::Image,
            MediaCounts::default(),
            0
        ),
        "[image attachment: a.png]"
    );
}

fn arb_json_string() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        "(image|application|audio|video)/[a-z.+-]{0,10}( ?; ?[a-z]=[a-z]{0,3})?"
            .prop_map(Value::from),
        "[a-zA-Z0-9 ._/\\\\-]{0,30}\\.(png|PDF|jpg|webp|bin|)".prop_map(Value::from),
    ]
}

fn arb_attachment() -> impl Strategy<Value = Value> {
    prop_oneof![
        arb_json_string(),
        (
            arb_json_string(),
            arb_json_string(),
            arb_json_string(),
            prop_oneof![
                arb_json_string(),
                "https?://[a-z.]{0,10}(/[a-zA-Z0-9.%]{0,12}){0,4}(\\?[a-z=.]{0,10})?"
                    .prop_map(Value::from),
            ],
        )
            .prop_map(|(mime, kind, name, url)| {
                json!({"mimeType": mime, "kind": kind, "fileName": name, "url": url})
            }),
    ]
}

proptest! {
    #[test]
    fn classification_never_panics(
        attachment in arb_attachment(),
        response in proptest::option::of(".{0,30}"),
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        scope in prop_oneof![Just(TrustedScope::None), Just(TrustedScope::Image), Just(TrustedScope::Visual)],
    ) {
        let c = classify(scope, &attachment, response.as_deref(), &bytes);
        prop_assert!(!c.mime_type.is_empty());
        prop_assert_eq!(c.kind, kind_for_mime(&c.mime_type));
        // Scopes nest: whatever `image` hides, `visual` hides too.
        if classify(TrustedScope::Image, &attachment, response.as_deref(), &bytes).hidden {
            prop_assert!(classify(TrustedScope::Visual, &attachment, response.as_deref(), &bytes).hidden);
        }
        prop_assert!(!classify(TrustedScope::None, &attachment, response.as_deref(), &bytes).hidden);
        let _ = requires_trusted_failure(scope, &attachment);
    }

    #[test]
    fn names_stay_safe(raw in "\\PC{0,300}|.{0,300}", unique in "[0-9a-f]{0,32}") {
        let name = sanitize_file_name(&raw);
        prop_assert!(!name.is_empty());
        prop_assert!(!name.contains('/') && !name.contains('\\'));
        prop_assert!(!name.chars().any(char::is_control));
        prop_assert!(name.chars().count() <= MAX_FILE_NAME_CHARS);
        prop_assert!(name != "." && name != "..");
        let disk = disk_file_name(&unique, &raw);
        prop_assert!(disk.len() <= MAX_DISK_NAME_BYTES);
        prop_assert!(disk.starts_with(DISK_NAME_PREFIX));
        prop_assert!(!disk.contains('/'));
    }

    #[test]
    fn marker_text_never_panics(hidden in 0usize..20, unavailable in 0usize..20, available in 0usize..40) {
        let counts = MediaCounts { hidden, unavailable };
        for scope in [TrustedScope::None, TrustedScope::Image, TrustedScope::Visual] {
            let text = markers(scope, counts, available);
            prop_assert_eq!(text.is_some(), scope != TrustedScope::None && hidden + unavailable > 0);
        }
    }
}
