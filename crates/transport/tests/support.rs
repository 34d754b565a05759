//! Small local servers on 127.0.0.1:0 for the integration tests: a hyper
//! server for REST (a handler decides each reply) and a raw TCP server for the
//! stream and media tests (scripts write exact bytes, split where they like).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use canon_transport::net::{BoxFuture, Resolver};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{HeaderMap, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the REST server saw it.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) uri: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// What the REST server answers.
pub(crate) enum Reply {
    Json(u16, serde_json::Value),
    Raw(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Close the connection without any response (after reading the request).
    Drop,
    /// Wait, then reply.
    Sleep(Duration, Box<Reply>),
}

type Handler = Arc<dyn Fn(&Recorded, usize) -> Reply + Send + Sync>;

pub(crate) struct RestServer {
    pub(crate) addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn into_response(reply: Reply) -> BoxFuture<Result<Response<Full<Bytes>>, std::io::Error>> {
    Box::pin(async move {
        match reply {
            Reply::Json(status, value) => Ok(Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(serde_json::to_vec(&value).unwrap())))
                .unwrap()),
            Reply::Raw(status, headers, body) => {
                let mut builder = Response::builder().status(status);
                for (name, value) in headers {
                    builder = builder.header(name, value);
                }
                Ok(builder.body(Full::new(Bytes::from(body))).unwrap())
            }
            Reply::Drop => Err(std::io::Error::other("dropped on purpose")),
            Reply::Sleep(wait, next) => {
                tokio::time::sleep(wait).await;
                into_response(*next).await
            }
        }
    })
}

impl RestServer {
    pub(crate) async fn start(
        handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> RestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let handler: Handler = Arc::new(handler);
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let handler = handler.clone();
                        let recorded = recorded.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let rec = Recorded {
                                method: parts.method.to_string(),
                                uri: parts.uri.to_string(),
                                headers: parts.headers,
                                body,
                            };
                            let index = {
                                let mut all = recorded.lock().unwrap();
                                all.push(rec.clone());
                                all.len() - 1
                            };
                            into_response(handler(&rec, index)).await
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        RestServer {
            addr,
            requests,
            task,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

/// A raw TCP server: for connection number `n` (0-based) it reads the request
/// head, records it, and runs the script on the socket.
pub(crate) struct RawServer {
    pub(crate) addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) type Script = Arc<dyn Fn(usize, TcpStream) -> BoxFuture<()> + Send + Sync>;

pub(crate) async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

impl RawServer {
    pub(crate) async fn start(
        script: impl Fn(usize, TcpStream) -> BoxFuture<()> + Send + Sync + 'static,
    ) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads: Arc<Mutex<Vec<String>>> = Arc::default();
        let script: Script = Arc::new(script);
        let recorded = heads.clone();
        let task = tokio::spawn(async move {
            let mut n = 0;
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let head = read_head(&mut stream).await;
                recorded.lock().unwrap().push(head);
                tokio::spawn(script(n, stream));
                n += 1;
            }
        });
        RawServer { addr, heads, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// Writes `parts` one by one with a flush and a short pause between them, so
/// the client sees them as separate reads.
pub(crate) async fn write_parts(stream: &mut TcpStream, parts: &[&[u8]]) {
    for part in parts {
        if stream.write_all(part).await.is_err() {
            return;
        }
        let _ = stream.flush().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub(crate) const SSE_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

/// A resolver answering from a fixed table and recording every lookup.
#[derive(Default)]
pub(crate) struct MapResolver {
    pub(crate) table: HashMap<String, Vec<IpAddr>>,
    pub(crate) lookups: Mutex<Vec<String>>,
}

impl Resolver for MapResolver {
    fn resolve(&self, host: String, port: u16) -> BoxFuture<std::io::Result<Vec<SocketAddr>>> {
        self.lookups.lock().unwrap().push(host.clone());
        let answer = self
            .table
            .get(&host)
            .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        Box::pin(async move { answer.ok_or_else(|| std::io::Error::other("no such host")) })
    }
}

/// A `Resolver` wrapper that can be shared with the test.
pub(crate) struct SharedResolver(pub(crate) Arc<MapResolver>);

impl Resolver for SharedResolver {
    fn resolve(&self, host: String, port: u16) -> BoxFuture<std::io::Result<Vec<SocketAddr>>> {
        self.0.resolve(host, port)
    }
}
