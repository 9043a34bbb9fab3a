//! A stand-in Kubernetes API server that replays recorded exchanges.
//!
//! A fixture (`tests/fixtures/kubernetes/<name>.json`) is the list of requests a client is
//! expected to make, in order, each with the answer a real API server gives: `method`,
//! `path` (with the query), optionally the request `body` (JSON, compared as JSON) and its
//! `content_type`, then `status` and `response` (JSON). `${NAME}` in a fixture is replaced
//! by the test's variables before parsing. A request that is not the next one expected is
//! answered 500 and recorded as a mismatch; [`ApiServer::finish`] fails the test on any
//! mismatch or exchange left over.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;

/// Largest request body read.
const MAX_BODY: usize = 1 << 20;

/// One recorded request and its answer.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default)]
    pub content_type: Option<String>,
    pub status: u16,
    pub response: Value,
}

#[derive(Default)]
struct Log {
    expected: VecDeque<Exchange>,
    /// `METHOD path` of every request received.
    seen: Vec<String>,
    mismatches: Vec<String>,
}

/// The server: replays one fixture on 127.0.0.1.
pub struct ApiServer {
    pub addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    task: tokio::task::JoinHandle<()>,
}

/// Reads fixture `name`, with `${K}` replaced by `V` for every `(K, V)` of `vars`.
pub fn fixture(name: &str, vars: &[(&str, &str)]) -> Vec<Exchange> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubernetes")
        .join(format!("{name}.json"));
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    for (k, v) in vars {
        text = text.replace(&format!("${{{k}}}"), v);
    }
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

impl ApiServer {
    /// Serves `exchanges` on a free port.
    pub async fn start(exchanges: Vec<Exchange>) -> ApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Log {
            expected: exchanges.into(),
            ..Log::default()
        }));
        let shared = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let log = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let log = log.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&log, req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        ApiServer { addr, log, task }
    }

    /// A kube client talking to this server (plain HTTP).
    pub fn client(&self) -> kube::Client {
        let url = format!("http://{}", self.addr).parse().unwrap();
        let config = kube::Config::new(url);
        kube::Client::try_from(config).expect("kube client")
    }

    /// The requests received so far, as `METHOD path`.
    pub fn seen(&self) -> Vec<String> {
        self.log.lock().unwrap().seen.clone()
    }

    /// Fails the test if a request was not the one expected or an exchange was not used;
    /// returns the requests received.
    pub fn finish(&self) -> Vec<String> {
        let log = self.log.lock().unwrap();
        assert!(
            log.mismatches.is_empty(),
            "unexpected requests: {:#?}",
            log.mismatches
        );
        assert!(
            log.expected.is_empty(),
            "requests expected but not made: {:#?}\n(received: {:#?})",
            log.expected
                .iter()
                .map(|e| format!("{} {}", e.method, e.path))
                .collect::<Vec<_>>(),
            log.seen
        );
        log.seen.clone()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(log: &Mutex<Log>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(500, &serde_json::json!({ "error": e.to_string() })),
    };
    let body: Option<Value> = if body.is_empty() {
        None
    } else {
        serde_json::from_slice(&body).ok()
    };
    let mut log = log.lock().unwrap();
    let request = format!("{method} {path}");
    log.seen.push(request.clone());
    let Some(next) = log.expected.pop_front() else {
        log.mismatches
            .push(format!("{request}: no request expected any more"));
        return reply(500, &serde_json::json!({ "error": "unexpected" }));
    };
    let mut wrong = Vec::new();
    if next.method != method || next.path != path {
        wrong.push(format!("expected {} {}", next.method, next.path));
    }
    if next.body.is_some() && next.body != body {
        wrong.push(format!("body {body:?}, expected {:?}", next.body));
    }
    if next.content_type.is_some() && next.content_type != content_type {
        wrong.push(format!(
            "content type {content_type:?}, expected {:?}",
            next.content_type
        ));
    }
    if !wrong.is_empty() {
        log.mismatches
            .push(format!("{request}: {}", wrong.join("; ")));
        // Put it back: the next request may still be the expected one.
        log.expected.push_front(next);
        return reply(500, &serde_json::json!({ "error": "unexpected" }));
    }
    reply(next.status, &next.response)
}

fn reply(status: u16, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}
