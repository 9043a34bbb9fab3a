//! Serving a peer connection on the worker it is for: requests from another node's worker
//! go to this worker's core; answers go back, in whatever order they are ready.

use std::cell::Cell;
use std::rc::Rc;

use bytes::BytesMut;
use placement::Replica;
use prost::Message;
use tls::Detached;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::spawn_local;
use wire::frame::{self, HEADER_LEN};
use wire::pb;

use super::worker::Worker;
use crate::error::NodeError;
use crate::peer::convert::{request_from_pb, response_to_pb};
use crate::peer::transport::MAX_PEER_FRAME;

/// Most requests of one connection being answered at once: the connection is not read
/// further until answers went out.
const MAX_IN_FLIGHT: usize = 1024;

/// Serves `stream` (a connection from worker `from`, its hello accepted) until it closes or
/// the node stops.
pub async fn serve(w: Rc<Worker>, stream: Detached, from: Replica) {
    let Ok(stream) = stream.attach() else {
        return;
    };
    let (mut read, mut write) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<pb::PeerResponse>(MAX_IN_FLIGHT);
    let outstanding = Rc::new(Cell::new(0usize));
    let room = Rc::new(Notify::new());
    {
        let outstanding = outstanding.clone();
        let room = room.clone();
        spawn_local(async move {
            let mut out = Vec::with_capacity(16 * 1024);
            while let Some(first) = rx.recv().await {
                out.clear();
                let mut n = 1;
                frame::encode(&first, &mut out);
                while let Ok(more) = rx.try_recv() {
                    frame::encode(&more, &mut out);
                    n += 1;
                }
                outstanding.set(outstanding.get().saturating_sub(n));
                room.notify_one();
                if write.write_all(&out).await.is_err() || write.flush().await.is_err() {
                    return;
                }
            }
        });
    }
    let mut shutdown = w.shared.shutdown();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        while outstanding.get() >= MAX_IN_FLIGHT {
            room.notified().await;
        }
        // Replicated writes slow down with the log too.
        w.journal.wait_room().await;
        match frame::frame_len(&buf, MAX_PEER_FRAME) {
            Err(_) => return,
            Ok(Some(len)) => {
                let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
                outstanding.set(outstanding.get() + 1);
                match pb::PeerRequest::decode(body) {
                    Ok(req) => {
                        let id = req.id;
                        // Pub/sub: delivered to this node's subscribers, not the core.
                        if let Some(pb::peer_request::Msg::Publish(relay)) = req.msg {
                            let _ = tx.try_send(crate::pubsub::relay::receive(&w, id, relay));
                            continue;
                        }
                        // Keys: a page of this node's key listing, not for the core.
                        if let Some(pb::peer_request::Msg::KeyScan(scan)) = req.msg {
                            crate::front::resp::listing::serve_peer(&w, id, scan, tx.clone());
                            continue;
                        }
                        match request_from_pb(req) {
                            Ok((id, msg)) => w.on_peer_request(from, msg, id, tx.clone()),
                            Err(e) => {
                                let _ = tx.try_send(response_to_pb(id, Err(e)));
                            }
                        }
                    }
                    Err(e) => {
                        let e = NodeError::BadRequest(format!("undecodable peer request: {e}"));
                        let _ = tx.try_send(response_to_pb(0, Err(e)));
                    }
                }
                continue;
            }
            Ok(None) => {}
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        tokio::select! {
            r = read.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
