//! The client ports: the shared native front port (requests for any key, forwarded to a
//! worker holding it), the RESP port, and each worker's own native port (requests for its
//! keys; others get a redirect).
//!
//! Connections accepted on a shared port are spread over the workers round-robin; each is
//! then served on its worker's thread by the [`pipeline`] with its protocol's codec.
//! Client ports carry client operations only: peer-plane messages arrive on the peer port
//! (`crate::peer`), and a client sending one gets a clear error.
//!
//! # Layout
//! - [`pipeline`]: the connection pipeline both protocols share;
//! - [`native`]: the native protocol's codec and requests;
//! - [`resp`]: the Redis protocol's codec and commands;
//! - [`http`]: the HTTP port: metrics and health.

pub mod http;
pub mod native;
pub mod pipeline;
mod read_clock;
pub mod resp;

use std::rc::Rc;
use std::time::Duration;

use tls::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::spawn_local;

use crate::driver::conns::ConnectionPermit;
use crate::driver::worker::{Worker, WorkerMsg};

/// Which protocol a port speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Native protocol on the shared front port: forwards requests for other workers' keys.
    NativeFront,
    /// Native protocol on a worker's own port: redirects requests for other workers' keys.
    NativeOwn,
    /// Redis protocol.
    Resp,
}

/// Serves one connection on `w` with `protocol`, after its TLS handshake if the node has
/// TLS (a handshake must finish within `Limits::handshake_timeout`).
async fn serve(
    w: Rc<Worker>,
    tcp: TcpStream,
    protocol: Protocol,
    permit: Option<ConnectionPermit>,
) {
    // ---- keys and server: CLIENT LIST shows where a RESP connection comes from ----
    let peer = crate::clients::Peer {
        addr: tcp.peer_addr().ok().map(|a| a.to_string()),
        laddr: tcp.local_addr().ok().map(|a| a.to_string()),
        fd: fd_of(&tcp),
    };
    let acceptor = w.shared.tls.as_ref().map(|t| &t.clients);
    let limit = w.shared.config.limits.handshake_timeout();
    let stream = match tokio::time::timeout(limit, Stream::accept_maybe(acceptor, tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            return;
        }
    };
    let node_certificate = stream.peer_verified();
    match protocol {
        Protocol::NativeFront => {
            let codec = native::Native::new(&w, true, node_certificate);
            pipeline::serve(w, stream, permit, codec).await
        }
        Protocol::NativeOwn => {
            let codec = native::Native::new(&w, false, node_certificate);
            pipeline::serve(w, stream, permit, codec).await
        }
        Protocol::Resp => {
            let codec = resp::Resp::accepted(&w, peer);
            pipeline::serve(w, stream, permit, codec).await
        }
    }
}

/// The socket's file descriptor (`CLIENT LIST`'s `fd`), where there is one.
fn fd_of(tcp: &TcpStream) -> Option<i64> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        Some(i64::from(tcp.as_raw_fd()))
    }
    #[cfg(not(unix))]
    {
        let _ = tcp;
        None
    }
}

/// Accepts clients on this worker's own port and serves them here.
pub async fn accept_own(w: Rc<Worker>, listener: TcpListener) {
    let mut shutdown = w.shared.shutdown();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        match accepted {
            Ok((stream, _)) => {
                let permit = ConnectionPermit::acquire(&w.shared.connections);
                spawn_local(serve(w.clone(), stream, Protocol::NativeOwn, permit));
            }
            Err(e) => accept_error(e).await,
        }
    }
}

/// Accepts clients on a shared port and spreads them over the workers round-robin.
pub async fn accept_shared(w: Rc<Worker>, listener: TcpListener, protocol: Protocol) {
    let mut shutdown = w.shared.shutdown();
    let workers = w.shared.mesh.len().max(1) as u32;
    let mut next = 0u32;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                accept_error(e).await;
                continue;
            }
        };
        let permit = ConnectionPermit::acquire(&w.shared.connections);
        let target = next % workers;
        next = next.wrapping_add(1);
        if target == w.index || permit.is_none() {
            spawn_local(serve(w.clone(), stream, protocol, permit));
            continue;
        }
        let Ok(std_stream) = stream.into_std() else {
            continue;
        };
        let handover = WorkerMsg::Run(Box::new(move |w: &Rc<Worker>| {
            if let Ok(stream) = TcpStream::from_std(std_stream) {
                spawn_local(serve(w.clone(), stream, protocol, permit));
            }
        }));
        // A worker that is gone (shutting down) drops the connection.
        let _ = w.shared.mesh.send(target, handover).await;
    }
}

/// Errors from `accept` (e.g. out of file descriptors) must not end the loop: log, back off.
async fn accept_error(e: std::io::Error) {
    tracing::warn!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}
