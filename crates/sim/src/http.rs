//! The HTTP request and reply types every handler shares, and the small request helpers that
//! need nothing but the request: query decoding, the JSON body as an object, required string
//! members, the 400 and 429 answers, and strict base64 decoding. It imports no other module of
//! the simulator, so the REST handlers, the verbs, the interactions, the control API and the
//! server can all use it.

use serde_json::{json, Map, Value};

/// A request as the handlers see it.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// HTTP method, upper case.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Headers, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Raw body.
    pub body: Vec<u8>,
}

impl ApiRequest {
    /// First header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The bearer token, if any.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, rest) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    }

    /// The body as JSON (`None` when it is not JSON).
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Decoded query parameters.
    pub fn query_params(&self) -> Vec<(String, String)> {
        parse_query(&self.query)
    }
}

/// A response.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: ReplyBody,
}

/// A response body.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyBody {
    /// JSON.
    Json(Value),
    /// Raw bytes with a content type.
    Bytes(Vec<u8>, String),
}

impl Reply {
    /// 200 with a JSON body.
    pub fn ok(body: Value) -> Self {
        Self::json(200, body)
    }

    /// A JSON reply.
    pub fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(body),
        }
    }

    /// A Canon error `{error, code}`.
    pub fn error(status: u16, code: &str, message: &str) -> Self {
        Self::json(status, json!({"error": message, "code": code}))
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The JSON body (null for bytes).
    pub fn json_body(&self) -> Value {
        match &self.body {
            ReplyBody::Json(v) => v.clone(),
            ReplyBody::Bytes(..) => Value::Null,
        }
    }
}

/// Short-circuit helper: `Err(Reply)` is an early answer.
pub type Handled<T> = Result<T, Reply>;

/// Percent-decodes a query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `a=b&c=d` into decoded pairs.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// A 400 Canon error with this code and message.
pub(crate) fn bad(code: &str, message: &str) -> Reply {
    Reply::error(400, code, message)
}

/// The body as a JSON object, else 400.
pub fn body_object(req: &ApiRequest) -> Handled<Map<String, Value>> {
    match req.json() {
        Some(Value::Object(map)) => Ok(map),
        _ => Err(bad("INVALID_BODY", "request body must be a JSON object")),
    }
}

/// A required string member, else 400.
pub fn required_str<'a>(body: &'a Map<String, Value>, key: &str) -> Handled<&'a str> {
    body.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("INVALID_REQUEST", &format!("{key} is required")))
}

/// 429 with `retryAfter` and `Retry-After`.
pub fn rate_limited(retry_after: u64) -> Reply {
    Reply::json(
        429,
        json!({"error": "rate limit exceeded", "code": "RATE_LIMITED", "retryAfter": retry_after}),
    )
    .with_header("retry-after", &retry_after.to_string())
}

/// Strict standard base64 (with padding) decoding.
pub fn decode_base64(input: &str) -> Option<Vec<u8>> {
    fn val(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let bytes = input.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let chunks = bytes.len() / 4;
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i + 1 == chunks;
        let pad = chunk.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for (j, c) in chunk.iter().enumerate() {
            let v = if j >= 4 - pad { 0 } else { val(*c)? };
            n = (n << 6) | v;
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_strict() {
        assert_eq!(decode_base64("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(decode_base64("aGVsbG8=").as_deref(), Some(&b"hello"[..]));
        assert_eq!(decode_base64("").as_deref(), Some(&b""[..]));
        assert!(decode_base64("aGk").is_none());
        assert!(decode_base64("a=Gk").is_none());
        assert!(decode_base64("aG!=").is_none());
    }

    #[test]
    fn query_decoding_accepts_both_comma_spellings() {
        let q = parse_query("events=messages%2Ccontacts&x=a,b&y=%zz");
        assert_eq!(q[0].1, "messages,contacts");
        assert_eq!(q[1].1, "a,b");
        assert_eq!(q[2].1, "%zz");
    }
}
