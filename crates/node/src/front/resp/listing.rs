//! Listing the cluster's keys (RESP `KEYS`, `SCAN`, `RANDOMKEY`, `DBSIZE`, `FLUSHDB`): one
//! page is asked of every worker of this node and, as a `KeyScan` peer request, of every
//! other live member of its tier; the answers are merged and deduplicated.
//!
//! A page is the keys with a placement hash in `[from, next)`: every node visits its keys
//! in hash order from `from` until about `count` keys were visited on each worker, and says
//! where it stopped; the merged page keeps the keys below the smallest of those places,
//! which is the next cursor. So the cursor is a position in one order shared by every
//! worker and node — no node or worker index is needed in it — and a key present on any
//! answering node for the whole scan is returned; a key held by several nodes is in the same
//! merged page from each and returned once.
//!
//! Bounds: `count` is at most [`MAX_SCAN_COUNT`](super::keys::MAX_SCAN_COUNT) per worker, a
//! node's answer at most [`MAX_PAGE_BYTES`] of keys (it stops early, at a hash boundary),
//! and a member that does not answer within [`ANSWER_TIMEOUT`] fails the command with an
//! error naming it (a partial listing would silently miss keys).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::spawn_local;
use wire::pb;

use super::reply::redis_type_name;
use crate::driver::worker::{Worker, WorkerMsg};
use crate::glob;
use crate::peer::transport::PeerConn;
use crate::shard::ScanPage;

/// Most bytes of keys one node answers in a page: it stops at the first hash boundary past
/// it (well under the peer frame limit).
pub(crate) const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;
/// Time a member may take to answer a page.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Which keys a page lists.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    /// A glob pattern (`MATCH`); `None`: every key.
    pub(crate) pattern: Option<Vec<u8>>,
    /// A Redis type name, lower case (`TYPE`); `None`: every type.
    pub(crate) ty: Option<String>,
}

/// A page: keys with their hash, sorted, each once, and where the next page starts
/// (`None`: the listing is exhausted).
pub(crate) type Page = (Vec<(u64, Vec<u8>)>, Option<u64>);

/// Keeps the keys of `pages` below the smallest place any of them stopped at, sorted and
/// deduplicated.
fn merge(pages: Vec<Page>) -> Page {
    let next = pages.iter().filter_map(|p| p.1).min();
    let mut keys: Vec<(u64, Vec<u8>)> = pages
        .into_iter()
        .flat_map(|p| p.0)
        .filter(|(h, _)| next.is_none_or(|n| *h < n))
        .collect();
    keys.sort();
    keys.dedup();
    (keys, next)
}

/// Cuts `page` after about `budget` bytes of keys, at a hash boundary (keys sharing a hash
/// are never split), setting `next` to where it was cut.
fn trim(page: &mut Page, budget: usize) {
    let mut bytes = 0usize;
    let mut cut = None;
    for (i, (h, k)) in page.0.iter().enumerate() {
        if bytes >= budget && i > 0 && page.0[i - 1].0 != *h {
            cut = Some(i);
            break;
        }
        bytes += k.len() + 8;
    }
    if let Some(i) = cut {
        page.1 = Some(page.0[i].0);
        page.0.truncate(i);
    }
}

/// One page from every worker of this node.
pub(crate) async fn node_page(w: &Worker, from: u64, count: usize, filter: &Filter) -> Page {
    let mut pages = Vec::new();
    for i in 0..w.shared.mesh.len() as u32 {
        let (tx, rx) = oneshot::channel();
        let f = filter.clone();
        let ask = WorkerMsg::Run(Box::new(move |w: &Rc<Worker>| {
            let keep = |key: &[u8], t: Option<lattice::LatticeType>| {
                f.pattern.as_ref().is_none_or(|p| glob::matches_key(p, key))
                    && f.ty
                        .as_ref()
                        .is_none_or(|want| t.is_some_and(|t| redis_type_name(t) == want))
            };
            let page: ScanPage = w.core().shard().scan_keys(from, count, &keep);
            let _ = tx.send(page);
        }));
        if w.shared.mesh.send(i, ask).await.is_ok() {
            if let Ok(p) = rx.await {
                let keys = p.keys.into_iter().map(|(h, k)| (h, k.into_vec())).collect();
                pages.push((keys, p.next));
            }
        }
    }
    let mut page = merge(pages);
    trim(&mut page, MAX_PAGE_BYTES);
    page
}

/// One page of the whole cluster: this node's and every other live data member's, merged.
/// An error names a member that did not answer.
pub(crate) async fn cluster_page(
    w: &Rc<Worker>,
    from: u64,
    count: usize,
    filter: &Filter,
) -> Result<Page, String> {
    let members = same_tier_members(w);
    let req = pb::KeyScan {
        from,
        count: count as u64,
        pattern: filter.pattern.clone().map(Bytes::from),
        r#type: filter.ty.clone(),
    };
    // Every member is asked at once; this node's workers meanwhile.
    let remote: Vec<_> = members
        .into_iter()
        .map(|addr| {
            let (req, w) = (req.clone(), w.clone());
            spawn_local(async move {
                let page = ask(&w, &addr, req).await;
                page.map_err(|e| (addr, e))
            })
        })
        .collect();
    let mut pages = vec![node_page(w, from, count, filter).await];
    for task in remote {
        match task.await {
            Ok(Ok(p)) => pages.push(p),
            Ok(Err((addr, e))) => {
                return Err(format!(
                    "ERR the cluster member at {addr} did not answer the key listing: {e}"
                ))
            }
            Err(e) => return Err(format!("ERR the key listing failed: {e}")),
        }
    }
    Ok(merge(pages))
}

/// The peer addresses of the other live members of this node's tier (`memory` or `disk`):
/// the nodes a listing asks. A memory node does not ask the disk tier, whose replicas lag
/// behind by the write-back (a key just deleted would be listed from there).
pub(crate) fn same_tier_members(w: &Worker) -> Vec<String> {
    let me = &w.shared.config.node_id;
    let snapshot = w.shared.snapshots.borrow().clone();
    let Some(role) = snapshot
        .members
        .iter()
        .find(|m| &m.node_id == me)
        .map(|m| m.role.clone())
    else {
        return Vec::new();
    };
    let live = |s: i32| s == pb::NodeStatus::Alive as i32 || s == pb::NodeStatus::Suspect as i32;
    snapshot
        .members
        .iter()
        .filter(|m| &m.node_id != me && !m.peer.is_empty() && m.role == role && live(m.status))
        .map(|m| m.peer.clone())
        .collect()
}

thread_local! {
    /// This worker thread's open listing connections, by peer address (to worker 0).
    static CONNS: RefCell<HashMap<String, PeerConn>> = RefCell::new(HashMap::new());
}

/// Asks the member at `addr` for one page.
async fn ask(w: &Worker, addr: &str, req: pb::KeyScan) -> Result<Page, String> {
    let conn = match CONNS.with(|c| c.borrow().get(addr).filter(|c| !c.is_broken()).cloned()) {
        Some(c) => c,
        None => {
            let c = w.open_peer(addr, 0).await.map_err(|e| e.to_string())?;
            CONNS.with(|m| m.borrow_mut().insert(addr.to_string(), c.clone()));
            c
        }
    };
    let call = pb::PeerRequest {
        id: fastrand::u64(1..),
        msg: Some(pb::peer_request::Msg::KeyScan(req)),
    };
    let answer = match tokio::time::timeout(ANSWER_TIMEOUT, conn.call(call)).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => {
            conn.abandon();
            return Err("no answer".into());
        }
    };
    match answer.result {
        Some(pb::peer_response::Result::KeyPage(p)) => {
            if p.hashes.len() != p.keys.len() {
                return Err("a malformed key page".into());
            }
            let keys = p
                .hashes
                .into_iter()
                .zip(p.keys.into_iter().map(|k| k.to_vec()));
            Ok((keys.collect(), p.next))
        }
        Some(pb::peer_response::Result::Error(e)) => Err(e.message),
        _ => Err("an unexpected answer".into()),
    }
}

/// Answers a `KeyScan` from another node with this node's page (in a task of its own; the
/// answer goes to `tx`).
pub(crate) fn serve_peer(
    w: &Rc<Worker>,
    id: u64,
    scan: pb::KeyScan,
    tx: mpsc::Sender<pb::PeerResponse>,
) {
    let w = w.clone();
    spawn_local(async move {
        let filter = Filter {
            pattern: scan.pattern.map(|p| p.to_vec()),
            ty: scan.r#type,
        };
        let count = (scan.count as usize).clamp(1, super::keys::MAX_SCAN_COUNT);
        let (keys, next) = node_page(&w, scan.from, count, &filter).await;
        let (hashes, keys): (Vec<u64>, Vec<Bytes>) =
            keys.into_iter().map(|(h, k)| (h, Bytes::from(k))).unzip();
        let _ = tx.try_send(pb::PeerResponse {
            id,
            result: Some(pb::peer_response::Result::KeyPage(pb::KeyPage {
                hashes,
                keys,
                next,
            })),
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merged_page_stops_at_the_earliest_stop_and_lists_each_key_once() {
        let a = (
            vec![(1, b"a".to_vec()), (5, b"b".to_vec()), (9, b"c".to_vec())],
            Some(10),
        );
        let b = (vec![(1, b"a".to_vec()), (6, b"d".to_vec())], Some(7));
        let c = (vec![(2, b"e".to_vec())], None);
        let (keys, next) = merge(vec![a, b, c]);
        assert_eq!(next, Some(7));
        let names: Vec<&[u8]> = keys.iter().map(|(_, k)| &k[..]).collect();
        assert_eq!(names, vec![&b"a"[..], b"e", b"b", b"d"]);
    }

    #[test]
    fn exhausted_pages_merge_to_an_exhausted_page() {
        let (keys, next) = merge(vec![(vec![(3, b"x".to_vec())], None), (vec![], None)]);
        assert_eq!(next, None);
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn trimming_cuts_at_a_hash_boundary_past_the_budget() {
        let mut page: Page = (
            vec![
                (1, vec![0; 10]),
                (2, vec![0; 10]),
                (2, vec![1; 10]),
                (3, vec![0; 10]),
            ],
            None,
        );
        trim(&mut page, 20);
        // 18 bytes after the first key: the second starts at 18 < 20; the third shares its
        // hash; the fourth is cut.
        assert_eq!(page.0.len(), 3);
        assert_eq!(page.1, Some(3));
        let mut small: Page = (vec![(1, vec![0; 10])], None);
        trim(&mut small, 1);
        assert_eq!(small.0.len(), 1);
        assert_eq!(small.1, None);
    }
}
