//! Cache-to-cache fetches of pinned versions (protocol OPT): each compute host's cache
//! listens on a loopback port (announced to the scheduler in its `HostHello`, passed to the
//! other hosts in every `RunFn`) and answers [`pb::FetchPinned`] with the versions it
//! pinned for the attempt (`OptPlane::fetch_pinned`).
//!
//! One frame in, one frame out, any number per connection. A request that does not decode
//! ends its own connection; a bad versionset is answered with an error; neither affects
//! other connections.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cache::{Key, MultiKeyCausal, VersionSet};
use tokio::net::{TcpListener, TcpStream};

use crate::conn;
use crate::data::DataPlane;
use crate::meta::{pinned_from_pb, pinned_to_pb, refs_from_pb, refs_to_pb};
use crate::pb;

/// How long one fetch may take (connect, ask, answer) before the attempt aborts.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves fetches of `data`'s pinned versions on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, data: Arc<dyn DataPlane>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_conn(stream, data.clone()));
    }
}

async fn serve_conn(mut stream: TcpStream, data: Arc<dyn DataPlane>) {
    while let Ok(Some(req)) = conn::read::<pb::FetchPinned, _>(&mut stream).await {
        let reply = answer(&*data, &req);
        if conn::write(&mut stream, &reply).await.is_err() {
            return;
        }
    }
}

/// The answer to one fetch.
pub fn answer(data: &dyn DataPlane, req: &pb::FetchPinned) -> pb::FetchPinnedReply {
    let Some(opt) = data.opt() else {
        return pb::FetchPinnedReply {
            error: "this host has no causal cache".into(),
            ..Default::default()
        };
    };
    match refs_from_pb(&req.refs) {
        Ok(refs) => pb::FetchPinnedReply {
            values: opt
                .fetch_pinned(req.attempt, &refs)
                .iter()
                .map(|(k, v)| pinned_to_pb(k, v))
                .collect(),
            error: String::new(),
        },
        Err(e) => pb::FetchPinnedReply {
            error: e.to_string(),
            ..Default::default()
        },
    }
}

/// Asks the cache at `addr` for the versions it pinned for `attempt` at or below `refs`.
///
/// # Errors
/// The cache cannot be reached or answers an error, within [`FETCH_TIMEOUT`].
pub async fn fetch(
    addr: &str,
    attempt: u64,
    refs: &VersionSet,
) -> Result<BTreeMap<Key, MultiKeyCausal>, String> {
    let ask = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = s.set_nodelay(true);
        let req = pb::FetchPinned {
            attempt,
            refs: refs_to_pb(refs),
        };
        conn::write(&mut s, &req).await.map_err(|e| e.to_string())?;
        let reply: pb::FetchPinnedReply = conn::read(&mut s)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the cache closed the connection")?;
        if !reply.error.is_empty() {
            return Err(reply.error);
        }
        let mut out = BTreeMap::new();
        for v in &reply.values {
            let (k, v) = pinned_from_pb(v).map_err(|e| e.to_string())?;
            out.insert(k, v);
        }
        Ok(out)
    };
    tokio::time::timeout(FETCH_TIMEOUT, ask)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {FETCH_TIMEOUT:?}")))
        .map_err(|e| format!("fetching pinned versions from {addr}: {e}"))
}
