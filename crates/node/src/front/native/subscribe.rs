//! A connection's subscriptions (see [`crate::subscribe`]).

use std::rc::Rc;
use std::time::Instant;

use tokio::sync::mpsc;
use wire::pb;

use crate::driver::worker::Worker;
use crate::error::NodeError;
use crate::shard::Route;
use crate::subscribe::{period_of, MAX_KEYS_PER_CONNECTION};

/// A connection's hold on its worker's subscription table: registered at its first
/// `Subscribe`, and dropped with the connection, which ends its subscriptions.
pub struct ConnectionSubscriptions {
    w: Rc<Worker>,
    registered: Option<(u64, mpsc::Receiver<pb::Response>)>,
}

impl ConnectionSubscriptions {
    /// A connection on `w`'s worker, with no subscriptions yet.
    pub fn new(w: &Rc<Worker>) -> Self {
        ConnectionSubscriptions {
            w: w.clone(),
            registered: None,
        }
    }

    /// Runs a `Subscribe`: checks every key (size, reserved space, held by this worker —
    /// subscriptions are never forwarded) before subscribing any; returns the number of
    /// distinct keys subscribed.
    pub fn subscribe(&mut self, s: pb::Subscribe) -> Result<usize, NodeError> {
        if s.keys.len() > MAX_KEYS_PER_CONNECTION {
            return Err(NodeError::InvalidArgument(format!(
                "{} keys exceed the limit of {MAX_KEYS_PER_CONNECTION} keys per connection",
                s.keys.len()
            )));
        }
        self.w.with_core(|c| {
            let shard = c.shard_mut();
            for key in &s.keys {
                shard.check_key(key)?;
                if shard.route(key) != Route::Local {
                    return Err(NodeError::Redirect(shard.replica_addrs(key)));
                }
            }
            Ok(())
        })?;
        let w = &self.w;
        let (id, _) = self
            .registered
            .get_or_insert_with(|| w.subscriptions.borrow_mut().register());
        let n = w.subscriptions.borrow_mut().subscribe_from(
            *id,
            &s.keys,
            &s.versions,
            period_of(s.period_ms),
            Instant::now(),
        )?;
        w.subscribed.notify_one();
        Ok(n)
    }

    /// True once the connection has subscribed (it then waits for pushes, not requests).
    pub fn any(&self) -> bool {
        self.registered.is_some()
    }

    /// Runs an `Unsubscribe`; returns how many subscriptions ended.
    pub fn unsubscribe(&mut self, u: &pb::Unsubscribe) -> usize {
        match &self.registered {
            Some((id, _)) => self.w.subscriptions.borrow_mut().unsubscribe(*id, &u.keys),
            None => 0,
        }
    }

    /// Waits for the next push (forever on a connection that never subscribed), as a frame.
    pub async fn next_push(&mut self) -> Vec<u8> {
        if let Some((_, rx)) = &mut self.registered {
            if let Some(push) = rx.recv().await {
                let mut out = Vec::new();
                wire::frame::encode(&push, &mut out);
                return out;
            }
        }
        std::future::pending().await
    }

    /// Appends every push waiting now to `out`, as frames.
    pub fn drain_into(&mut self, out: &mut Vec<u8>) {
        if let Some((_, rx)) = &mut self.registered {
            while let Ok(push) = rx.try_recv() {
                wire::frame::encode(&push, out);
            }
        }
    }
}

impl Drop for ConnectionSubscriptions {
    fn drop(&mut self) {
        if let Some((id, _)) = self.registered.take() {
            self.w.subscriptions.borrow_mut().close(id);
        }
    }
}
