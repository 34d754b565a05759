//! A minimal HTTP/1.1 client over raw TCP (so the tests exercise the simulator's real wire
//! bytes, chunk boundaries included) plus an incremental SSE reader.

use std::net::SocketAddr;
use std::time::Duration;

use canon_sim::{Sim, SimConfig, SimHandle};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for anything a test waits on (never a blind sleep).
pub(crate) const WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn sim() -> SimHandle {
    Sim::start(SimConfig::for_tests())
        .await
        .expect("sim starts")
}

pub(crate) async fn sim_with(f: impl FnOnce(&mut SimConfig)) -> SimHandle {
    let mut config = SimConfig::for_tests();
    f(&mut config);
    Sim::start(config).await.expect("sim starts")
}

#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Resp {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn code(&self) -> Option<String> {
        self.json()["code"].as_str().map(str::to_owned)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers)
}

/// Decodes a complete chunked body; `None` when it is truncated.
pub(crate) fn dechunk(mut data: &[u8]) -> Option<(Vec<u8>, Vec<usize>)> {
    let mut out = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let eol = find(data, b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..eol]).ok()?.trim(), 16).ok()?;
        data = &data[eol + 2..];
        if size == 0 {
            return Some((out, sizes));
        }
        if data.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&data[..size]);
        sizes.push(size);
        data = &data[size + 2..];
    }
}

fn request_bytes(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or(&[]);
    req.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One request; `Err` when the connection was dropped or the body truncated.
pub(crate) async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Resp, String> {
    let fut = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream
            .write_all(&request_bytes(method, path, headers, body))
            .await
            .map_err(|e| e.to_string())?;
        let mut data = Vec::new();
        stream
            .read_to_end(&mut data)
            .await
            .map_err(|e| e.to_string())?;
        let end = find(&data, b"\r\n\r\n").ok_or("no response head")?;
        let (status, headers) = parse_head(&String::from_utf8_lossy(&data[..end]));
        let rest = &data[end + 4..];
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked {
            dechunk(rest).ok_or("truncated chunked body")?.0
        } else {
            let len: Option<usize> = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok());
            if len.is_some_and(|l| l > rest.len()) {
                return Err("truncated body".to_owned());
            }
            rest.to_vec()
        };
        Ok(Resp {
            status,
            headers,
            body,
        })
    };
    tokio::time::timeout(WAIT, fut)
        .await
        .map_err(|_| "timeout".to_owned())?
}

/// An authenticated JSON call.
pub(crate) async fn call(sim: &SimHandle, method: &str, path: &str, body: Option<Value>) -> Resp {
    call_as(sim, &sim.api_key(), method, path, body).await
}

pub(crate) async fn call_as(
    sim: &SimHandle,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Resp {
    let auth = format!("Bearer {key}");
    let bytes = body.map(|b| b.to_string().into_bytes());
    raw(
        sim.addr(),
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        bytes.as_deref(),
    )
    .await
    .expect("request answered")
}

/// A control-API call.
pub(crate) async fn control(
    sim: &SimHandle,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Resp {
    let bytes = body.map(|b| b.to_string().into_bytes());
    raw(
        sim.addr(),
        method,
        &format!("/__sim{path}"),
        &[],
        bytes.as_deref(),
    )
    .await
    .expect("control answered")
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    pub(crate) id: Option<String>,
    pub(crate) event: String,
    pub(crate) data: Value,
}

/// An open SSE stream read incrementally.
pub(crate) struct Sse {
    stream: TcpStream,
    pub(crate) status: u16,
    buf: Vec<u8>,
    utf8: Vec<u8>,
    text: String,
    pub(crate) chunk_sizes: Vec<usize>,
    pub(crate) ended: bool,
    pub(crate) aborted: bool,
    pub(crate) raw_text: String,
}

impl Sse {
    pub(crate) async fn open(sim: &SimHandle, last_event_id: Option<&str>) -> Self {
        Self::open_with_key(sim, &sim.api_key(), last_event_id).await
    }

    pub(crate) async fn open_with_key(
        sim: &SimHandle,
        key: &str,
        last_event_id: Option<&str>,
    ) -> Self {
        let auth = format!("Bearer {key}");
        let mut headers = vec![
            ("authorization", auth.as_str()),
            ("accept", "text/event-stream"),
        ];
        if let Some(id) = last_event_id {
            headers.push(("last-event-id", id));
        }
        let mut stream = TcpStream::connect(sim.addr()).await.expect("connect");
        stream
            .write_all(&request_bytes(
                "GET",
                "/agents/stream?events=messages%2Ccontacts,typing_presence,runtime_turn,voice",
                &headers,
                None,
            ))
            .await
            .expect("write");
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        let end = loop {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout(WAIT, stream.read(&mut tmp))
                .await
                .expect("head in time")
                .expect("read");
            assert!(n > 0, "stream closed before the head");
            buf.extend_from_slice(&tmp[..n]);
        };
        let (status, _) = parse_head(&String::from_utf8_lossy(&buf[..end]));
        let rest = buf[end + 4..].to_vec();
        Self {
            stream,
            status,
            buf: rest,
            utf8: Vec::new(),
            text: String::new(),
            chunk_sizes: Vec::new(),
            ended: false,
            aborted: false,
            raw_text: String::new(),
        }
    }

    /// Moves complete chunks from `buf` into `text`.
    fn drain_chunks(&mut self) {
        loop {
            let Some(eol) = find(&self.buf, b"\r\n") else {
                return;
            };
            let Ok(size) =
                usize::from_str_radix(String::from_utf8_lossy(&self.buf[..eol]).trim(), 16)
            else {
                self.aborted = true;
                return;
            };
            if size == 0 {
                self.ended = true;
                self.buf.clear();
                return;
            }
            if self.buf.len() < eol + 2 + size + 2 {
                return;
            }
            let chunk = self.buf[eol + 2..eol + 2 + size].to_vec();
            self.chunk_sizes.push(size);
            self.buf.drain(..eol + 2 + size + 2);
            // Decode incrementally: a write may end inside a UTF-8 sequence.
            self.utf8.extend_from_slice(&chunk);
            let valid = match std::str::from_utf8(&self.utf8) {
                Ok(s) => s.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => {
                    self.aborted = true;
                    return;
                }
            };
            let s = String::from_utf8_lossy(&self.utf8[..valid]).into_owned();
            self.utf8.drain(..valid);
            self.raw_text.push_str(&s);
            self.text.push_str(&s);
        }
    }

    async fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 65536];
        match tokio::time::timeout(WAIT, self.stream.read(&mut tmp)).await {
            Ok(Ok(0)) => {
                if !self.ended {
                    self.aborted = true;
                }
                false
            }
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
            Ok(Err(_)) => {
                self.aborted = true;
                false
            }
            Err(_) => panic!("no stream data within {WAIT:?}"),
        }
    }

    /// The next frame with an event name (comments and blank frames skipped); `None` at end.
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        loop {
            self.drain_chunks();
            let normalized = self.text.replace("\r\n", "\n").replace('\r', "\n");
            if let Some(pos) = normalized.find("\n\n") {
                let frame_text = normalized[..pos].to_owned();
                self.text = normalized[pos + 2..].to_owned();
                let mut id = None;
                let mut event = None;
                let mut data = Vec::new();
                for line in frame_text.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.trim().to_owned());
                    }
                }
                if let Some(event) = event {
                    let joined = data.join("\n");
                    let data = serde_json::from_str(&joined).unwrap_or(Value::String(joined));
                    return Some(Frame { id, event, data });
                }
                continue;
            }
            if self.ended || self.aborted || !self.fill().await {
                self.drain_chunks();
                if !self
                    .text
                    .replace("\r\n", "\n")
                    .replace('\r', "\n")
                    .contains("\n\n")
                {
                    return None;
                }
            }
        }
    }

    /// Skips frames until one named `event` arrives.
    pub(crate) async fn until(&mut self, event: &str) -> Frame {
        loop {
            let f = self
                .next()
                .await
                .unwrap_or_else(|| panic!("stream ended before {event}"));
            if f.event == event {
                return f;
            }
        }
    }

    /// Reads `connected` and `agent.context`.
    pub(crate) async fn handshake(&mut self) -> (Frame, Frame) {
        let c = self.next().await.expect("connected");
        assert_eq!(c.event, "connected");
        let a = self.next().await.expect("agent.context");
        assert_eq!(a.event, "agent.context");
        (c, a)
    }
}
