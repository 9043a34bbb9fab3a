//! `--http ADDR` of `latticekv faas scheduler` and `latticekv faas host`: `GET /metrics`
//! (their `latticekv_faas_*` families, rendered by `faas::metrics`) and `GET /health`
//! (`ok`). A small HTTP/1.1 responder: one request per connection (answered with
//! `Connection: close`), a head of at most [`MAX_HEAD`] bytes arriving within
//! [`HEAD_TIMEOUT`], at most [`MAX_CONNECTIONS`] at once; other methods get 405, other
//! paths 404, a malformed head 400, and the process keeps serving. Like a node's HTTP port
//! it shows counts only and takes no credentials: bind it where the scraper reaches it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// Largest request head read.
const MAX_HEAD: usize = 8 << 10;
/// Longest the request head may take.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

/// What `/metrics` answers: the Prometheus text of the moment.
pub(crate) type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Binds `addr` and serves `render` on it (on the current runtime) until `stop` turns
/// true; returns the bound address.
pub(crate) async fn start(
    addr: SocketAddr,
    render: Render,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            let Ok((stream, _)) = accepted else {
                // Out of descriptors, say: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let Ok(permit) = slots.clone().try_acquire_owned() else {
                continue; // over the limit: dropped, hence closed
            };
            let render = render.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(HEAD_TIMEOUT * 2, answer(stream, &render)).await;
                drop(permit);
            });
        }
    });
    Ok(bound)
}

/// Reads one request head from `stream` and answers it.
async fn answer(mut stream: TcpStream, render: &Render) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let complete = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 || head.len() + n > MAX_HEAD {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(true)
    })
    .await;
    let (status, kind, body) = match complete {
        Ok(Ok(true)) => route(&head, render),
        Ok(Ok(false)) | Err(_) => (400, "text/plain", "bad request\n".to_string()),
        Ok(Err(e)) => return Err(e),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Bad Request",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The status, content type and body for request `head`.
fn route(head: &[u8], render: &Render) -> (u16, &'static str, String) {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return (400, "text/plain", "bad request\n".into());
    };
    if !version.starts_with(b"HTTP/1.") {
        return (400, "text/plain", "bad request\n".into());
    }
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => (200, "text/plain; version=0.0.4", render()),
        (b"GET", b"/health") => (200, "text/plain", "ok\n".into()),
        (_, b"/metrics" | b"/health") => (405, "text/plain", "method not allowed\n".into()),
        _ => (404, "text/plain", "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let render: Render = Arc::new(|| "latticekv_x 1\n".to_string());
        let r = |head: &[u8]| {
            let (s, _, b) = route(head, &render);
            (s, b)
        };
        assert_eq!(
            r(b"GET /metrics HTTP/1.1\r\n\r\n"),
            (200, "latticekv_x 1\n".into())
        );
        assert_eq!(r(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").0, 200);
        assert_eq!(r(b"GET /health HTTP/1.1\r\n\r\n"), (200, "ok\n".into()));
        assert_eq!(r(b"POST /metrics HTTP/1.1\r\n\r\n").0, 405);
        assert_eq!(r(b"GET /nope HTTP/1.1\r\n\r\n").0, 404);
        assert_eq!(r(b"\x00\x01garbage\r\n\r\n").0, 400);
        assert_eq!(r(b"GET /metrics SPDY\r\n\r\n").0, 400);
    }
}
