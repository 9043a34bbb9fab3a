//! The HTTP port (`http` / `--http`): `GET /metrics` (Prometheus text, [`crate::metrics`]),
//! `GET /health` (`ok` while the node serves), and the status page: `GET /` (one HTML
//! file) and `GET /status.json` ([`crate::metrics::status`]), which it polls. Served on the
//! first worker's thread; at most [`MAX_CONNECTIONS`] at once, each closed after
//! [`CONNECTION_LIFETIME`]; requests with a body or another method are refused. The port
//! shows counts only — no values, and key names (the hot keys) only on a node whose client
//! ports take no credentials — so it needs no authentication; bind it where the scraper
//! can reach it.

use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::spawn_local;

use crate::driver::worker::{all_stats, Worker};
use crate::metrics::status::{self, StatusSnapshot};
use crate::metrics::{self, Members, Snapshot};

/// Most HTTP connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Longest an HTTP connection stays open (a scraper reconnects).
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The status page may load nothing but itself and `/status.json`: it works offline, and a
/// key name that slipped into its markup could not fetch or run anything.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
                           style-src 'unsafe-inline'; connect-src 'self'";
/// Longest the request head may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts HTTP connections on `listener` until the node stops.
pub async fn accept(w: Rc<Worker>, listener: TcpListener) {
    let mut shutdown = w.shared.shutdown();
    let slots = std::sync::Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let w = w.clone();
        spawn_local(async move {
            let service = service_fn(move |req| {
                let w = w.clone();
                async move { Ok::<_, Infallible>(route(&w, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
            drop(permit);
        });
    }
}

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn route(w: &Worker, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
    }
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            render(w).await,
        ),
        "/health" => reply(StatusCode::OK, "text/plain", "ok\n"),
        // The status page.
        "/" => {
            let mut r = reply(StatusCode::OK, "text/html; charset=utf-8", status::PAGE);
            r.headers_mut().insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                hyper::header::HeaderValue::from_static(PAGE_POLICY),
            );
            r
        }
        "/status.json" => reply(StatusCode::OK, "application/json", render_status(w).await),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /, /status.json, /metrics or /health\n",
        ),
    }
}

/// The node's metrics now.
async fn render(w: &Worker) -> String {
    let shared = &w.shared;
    let workers = all_stats(shared).await;
    let mut members = Members::default();
    for m in &shared.snapshots.borrow().members {
        match m.status {
            0 => members.alive += 1,
            1 => members.suspect += 1,
            _ => members.dead += 1,
        }
    }
    let policy = shared.policy.borrow().clone();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut text = metrics::render(&Snapshot {
        node_id: &shared.config.node_id,
        tier: shared.config.tier.name(),
        uptime_seconds: shared.started.elapsed().as_secs(),
        memory_budget_bytes: shared.config.limits.memory_budget_bytes(),
        workers: &workers,
        members,
        policy: policy.as_deref(),
        now_ms,
    });
    text.push_str(&shared.metrics_sources.render());
    text
}

/// The node's status now (the page's data).
async fn render_status(w: &Worker) -> String {
    let shared = &w.shared;
    let workers = all_stats(shared).await;
    let members = shared.snapshots.borrow().members.clone();
    status::render(&StatusSnapshot {
        node_id: &shared.config.node_id,
        tier: shared.config.tier.name(),
        uptime_ms: shared.started.elapsed().as_millis() as u64,
        memory_budget_bytes: shared.config.limits.memory_budget_bytes(),
        workers: &workers,
        members: &members,
        show_keys: !shared.users.required(),
    })
}
