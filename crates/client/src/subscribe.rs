//! Subscriptions: a stream of new versions of keys, pushed by their replicas
//! (`Subscribe` in the native protocol; see docs/subscriptions.md).
//!
//! [`Client::subscribe`] groups the keys by the replica address requests for them go to and
//! opens one dedicated connection per address (the pooled request connections do not expect
//! the server's `id = 0` pushes). A task of the subscription's own reads every connection's
//! frames, turns pushes into [`Notification`]s and hands them to [`Subscription::next`].
//!
//! The stream outlives replicas: a push saying `moved` (the key's replica changed) or a
//! connection that breaks makes the task refresh the topology and subscribe the keys
//! concerned again at their current replicas, retrying with backoff until it succeeds.
//!
//! Everything is bounded: notifications not yet taken by [`Subscription::next`] are kept as
//! the latest value per key (a slow reader skips versions, it never queues them), so memory
//! grows with the number of keys, not with the rate of writes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lattice::{Blob, Value};
use prost::Message;
use tls::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use wire::convert::value_from_pb;
use wire::frame::{self, HEADER_LEN};
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use crate::api::Client;
use crate::error::ClientError;

/// Notifications handed to [`Subscription::next`] ahead of the caller.
const DELIVERY_QUEUE: usize = 256;
/// Frames read from the connections and not yet handled by the subscription's task.
const EVENT_QUEUE: usize = 1024;
/// Largest push frame accepted.
const MAX_FRAME: usize = 64 * 1024 * 1024;
/// First wait before subscribing keys again after a failure; doubles up to `MAX_BACKOFF`.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between two attempts to subscribe keys again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Attempts of [`Client::subscribe`] (redirects, unreachable replicas) before it fails.
const FIRST_ATTEMPTS: usize = 10;

/// A new version of a subscribed key.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The key.
    pub key: Blob,
    /// Its value now (`None`: the key does not exist, or was deleted).
    pub value: Option<Value>,
}

/// A stream of [`Notification`]s for a set of keys, from [`Client::subscribe`].
///
/// Right after subscribing, each key's current value arrives; then each new version, at
/// most one per key per period (a key written several times within a period gets one
/// notification, with the latest value). Dropping the subscription ends it and closes its
/// connections.
pub struct Subscription {
    /// The keys still subscribed.
    keys: HashSet<Blob>,
    rx: mpsc::Receiver<Notification>,
    control: mpsc::Sender<Control>,
    task: tokio::task::AbortHandle,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Subscription {
    /// The next notification; `None` once no key is subscribed any more.
    pub async fn next(&mut self) -> Option<Notification> {
        loop {
            if self.keys.is_empty() {
                return None;
            }
            let n = self.rx.recv().await?;
            // Notifications queued before an unsubscribe are not delivered after it.
            if self.keys.contains(&n.key) {
                return Some(n);
            }
        }
    }

    /// The keys subscribed.
    pub fn keys(&self) -> impl Iterator<Item = &Blob> {
        self.keys.iter()
    }

    /// Ends the subscription of `keys` (others stay); no notification for them is
    /// delivered after this returns. Keys not subscribed are ignored.
    pub async fn unsubscribe<K: AsRef<[u8]>>(
        &mut self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<(), ClientError> {
        let keys: Vec<Blob> = keys
            .into_iter()
            .map(|k| Blob::from(k.as_ref()))
            .filter(|k| self.keys.remove(k))
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let (tx, rx) = oneshot::channel();
        // The task ends only once no key is left: if it is gone, there is nothing to end.
        if self
            .control
            .send(Control::Unsubscribe(keys, tx))
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Dropping the task drops its connections, which closes them: the servers then
        // drop their subscriptions.
        self.task.abort();
    }
}

/// The version of a value as the store reports it in `GetDelta` answers and pushes (a
/// 64-bit hash of its encoding, never 0), for [`Client::subscribe_from`]. Equal to the
/// store's for a value read from it: the encoding of a decoded value is the same.
pub fn value_version(value: &Value) -> u64 {
    wire::value_version(&wire::convert::value_to_pb(value))
}

impl Client {
    /// Subscribes to `keys`: their replicas push each key's current value, then its new
    /// versions, at most one per key every `period` (the server clamps it to [10 ms, 60 s];
    /// zero means its default, 100 ms). Fails if a key is refused (too long, reserved), a
    /// replica would hold more than 10,000 of the keys, or no replica can be reached.
    pub async fn subscribe<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        period: Duration,
    ) -> Result<Subscription, ClientError> {
        self.subscribe_from(keys.into_iter().map(|k| (k, 0)), period)
            .await
    }

    /// [`subscribe`](Client::subscribe) to keys whose values the caller already holds:
    /// each key with the [`value_version`] of the value it read, 0 for none. A key still at
    /// that version is not pushed until it changes (the value is not sent twice); a node
    /// that predates this pushes it anyway and the subscription does not deliver it.
    pub async fn subscribe_from<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = (K, u64)>,
        period: Duration,
    ) -> Result<Subscription, ClientError> {
        let mut versions = HashMap::new();
        let mut keys_set = HashSet::new();
        for (k, version) in keys {
            let k = Blob::from(k.as_ref());
            if version != 0 {
                versions.insert(k.clone(), version);
            }
            keys_set.insert(k);
        }
        let keys = keys_set;
        let period_ms = u32::try_from(period.as_millis()).unwrap_or(u32::MAX);
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let mut task = Task {
            client: self.clone(),
            period_ms,
            conns: HashMap::new(),
            placed: HashMap::new(),
            unplaced: keys.clone(),
            stale_layout: false,
            pending: HashMap::new(),
            order: VecDeque::new(),
            versions,
            events_tx,
            events,
            next_conn: 0,
            next_id: 0,
        };
        let mut attempts = 0;
        while let Err(e) = task.place().await {
            attempts += 1;
            if !(e.is_redirect() || e.is_retryable()) || attempts >= FIRST_ATTEMPTS {
                return Err(e);
            }
            tokio::time::sleep(MIN_BACKOFF * attempts as u32).await;
            task.stale_layout = true;
        }
        let (tx, rx) = mpsc::channel(DELIVERY_QUEUE);
        let (control, control_rx) = mpsc::channel(16);
        let task = tokio::spawn(task.run(tx, control_rx)).abort_handle();
        Ok(Subscription {
            keys,
            rx,
            control,
            task,
        })
    }
}

/// A request from the [`Subscription`] to its task.
enum Control {
    /// End these keys' subscriptions, then answer.
    Unsubscribe(Vec<Blob>, oneshot::Sender<()>),
}

/// What a connection's reader reports, tagged with the connection's id.
enum Event {
    /// A frame from the server.
    Frame(u64, Box<pb::Response>),
    /// The connection closed or failed.
    Closed(u64),
}

/// One dedicated connection to a replica address.
struct SubConn {
    addr: String,
    write: WriteHalf<Stream>,
    reader: tokio::task::AbortHandle,
}

impl Drop for SubConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The subscription's task: its connections and where each key is subscribed.
struct Task {
    client: Client,
    period_ms: u32,
    conns: HashMap<u64, SubConn>,
    /// Keys subscribed, and the connection they are subscribed on.
    placed: HashMap<Blob, u64>,
    /// Keys to subscribe (again).
    unplaced: HashSet<Blob>,
    /// Refresh the topology before subscribing keys again.
    stale_layout: bool,
    /// Notifications not yet handed over: the latest value per key, in `order`.
    pending: HashMap<Blob, Option<Value>>,
    order: VecDeque<Blob>,
    /// The version of each key's last notification (a new replica's first push of a value
    /// already delivered is not delivered again).
    versions: HashMap<Blob, u64>,
    events_tx: mpsc::Sender<Event>,
    events: mpsc::Receiver<Event>,
    next_conn: u64,
    next_id: u64,
}

impl Task {
    /// Delivers notifications, handles pushes and unsubscribes, and subscribes keys again
    /// where they moved, until the subscription is dropped or has no key left.
    async fn run(mut self, out: mpsc::Sender<Notification>, mut control: mpsc::Receiver<Control>) {
        let mut backoff = MIN_BACKOFF;
        let mut retry_at = Instant::now();
        loop {
            if !self.unplaced.is_empty() && Instant::now() >= retry_at {
                match self.place().await {
                    Ok(()) => backoff = MIN_BACKOFF,
                    Err(_) => {
                        self.stale_layout = true;
                        retry_at = Instant::now() + backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
                continue;
            }
            if self.placed.is_empty() && self.unplaced.is_empty() && self.order.is_empty() {
                return;
            }
            let deliver = !self.order.is_empty();
            let retry = !self.unplaced.is_empty();
            tokio::select! {
                event = self.events.recv() => {
                    if let Some(event) = event {
                        self.on_event(event);
                    }
                }
                c = control.recv() => match c {
                    None => return,
                    Some(Control::Unsubscribe(keys, reply)) => {
                        self.unsubscribe(keys).await;
                        let _ = reply.send(());
                    }
                },
                permit = out.reserve(), if deliver => match permit {
                    Ok(permit) => {
                        if let Some(n) = self.pop() {
                            permit.send(n);
                        }
                    }
                    Err(_) => return,
                },
                _ = tokio::time::sleep_until(retry_at), if retry => {}
            }
        }
    }

    /// Subscribes every key of `unplaced` at the replica address requests for it go to,
    /// one `Subscribe` per address. Stops at the first failure (the keys not subscribed
    /// stay in `unplaced`).
    async fn place(&mut self) -> Result<(), ClientError> {
        if self.stale_layout {
            // A failed refresh is not fatal: the old layout may still be right.
            let _ = self.client.refresh_topology().await;
            self.stale_layout = false;
        }
        let layout = self.client.layout();
        let mut groups: Vec<(String, Vec<Blob>)> = Vec::new();
        for key in &self.unplaced {
            let addr = layout.addr_for(key).unwrap_or(self.client.front());
            match groups.iter_mut().find(|(a, _)| a == addr) {
                Some((_, keys)) => keys.push(key.clone()),
                None => groups.push((addr.to_string(), vec![key.clone()])),
            }
        }
        let result = self.place_groups(groups).await;
        self.close_idle();
        result
    }

    async fn place_groups(&mut self, groups: Vec<(String, Vec<Blob>)>) -> Result<(), ClientError> {
        for (addr, keys) in groups {
            let conn = self.connect(&addr).await?;
            let op = ReqOp::Subscribe(pb::Subscribe {
                keys: keys.iter().map(|k| Bytes::copy_from_slice(k)).collect(),
                period_ms: self.period_ms,
                versions: keys
                    .iter()
                    .map(|k| self.versions.get(k).copied().unwrap_or(0))
                    .collect(),
            });
            match self.call(conn, op).await? {
                RespResult::Ack(_) => {
                    for key in keys {
                        self.unplaced.remove(&key);
                        self.placed.insert(key, conn);
                    }
                }
                other => {
                    return Err(ClientError::Protocol(format!(
                        "unexpected answer to Subscribe: {other:?}"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The connection to `addr`, opened if there is none.
    async fn connect(&mut self, addr: &str) -> Result<u64, ClientError> {
        if let Some((&id, _)) = self.conns.iter().find(|(_, c)| c.addr == addr) {
            return Ok(id);
        }
        let dial = crate::connection::dial(addr, self.client.tls());
        let stream = tokio::time::timeout(self.client.timeout(), dial)
            .await
            .map_err(|_| ClientError::Timeout)??;
        let (read, write) = tokio::io::split(stream);
        self.next_conn += 1;
        let id = self.next_conn;
        let reader = tokio::spawn(read_frames(read, id, self.events_tx.clone())).abort_handle();
        let conn = SubConn {
            addr: addr.to_string(),
            write,
            reader,
        };
        self.conns.insert(id, conn);
        if let Some(auth) = self.client.credentials().map(|c| c.request()) {
            if let Err(e) = self.call(id, auth).await {
                self.drop_conn(id);
                return Err(e);
            }
        }
        Ok(id)
    }

    /// Sends one request on connection `conn` and waits for its answer, handling the
    /// pushes and events that arrive meanwhile.
    async fn call(&mut self, conn: u64, op: ReqOp) -> Result<RespResult, ClientError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut out = Vec::new();
        let req = pb::Request {
            id,
            op: Some(op),
            ..Default::default()
        };
        frame::encode(&req, &mut out);
        let timeout = self.client.timeout();
        let Some(c) = self.conns.get_mut(&conn) else {
            return Err(ClientError::ConnectionLost {
                addr: String::new(),
                reason: "connection closed".into(),
            });
        };
        let addr = c.addr.clone();
        let write = async {
            c.write.write_all(&out).await?;
            c.write.flush().await
        };
        let written = tokio::time::timeout(timeout, write).await;
        if !matches!(written, Ok(Ok(()))) {
            self.drop_conn(conn);
            return Err(ClientError::ConnectionLost {
                addr,
                reason: "write failed".into(),
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            let event = match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(event)) => event,
                Ok(None) | Err(_) => {
                    // A silent peer: don't wait on this connection again.
                    self.drop_conn(conn);
                    return Err(ClientError::Timeout);
                }
            };
            match event {
                Event::Frame(c, resp) if c == conn && resp.id == id => {
                    return match resp.result {
                        Some(RespResult::Error(e)) => Err(ClientError::from_pb(e)),
                        Some(r) => Ok(r),
                        None => Err(ClientError::Protocol("response without a result".into())),
                    };
                }
                Event::Closed(c) if c == conn => {
                    self.drop_conn(conn);
                    return Err(ClientError::ConnectionLost {
                        addr,
                        reason: "closed by the server".into(),
                    });
                }
                other => self.on_event(other),
            }
        }
    }

    /// Handles a push or a closed connection.
    fn on_event(&mut self, event: Event) {
        let (conn, resp) = match event {
            Event::Closed(conn) => {
                self.drop_conn(conn);
                return;
            }
            Event::Frame(conn, resp) => (conn, resp),
        };
        // Anything else is an answer to a request that timed out, or an error about a
        // frame the server could not read: nothing to do.
        let Some(RespResult::Notification(n)) = resp.result else {
            return;
        };
        if resp.id != 0 {
            return;
        }
        let key = Blob::from(&n.key[..]);
        if self.placed.get(&key) != Some(&conn) {
            // Unsubscribed, or from a connection the key has left.
            return;
        }
        if n.moved {
            self.placed.remove(&key);
            self.unplaced.insert(key);
            self.stale_layout = true;
            return;
        }
        let value = match n.value.as_ref().map(value_from_pb).transpose() {
            Ok(v) => v,
            // Undecodable: the next version will tell.
            Err(_) => return,
        };
        if self.versions.insert(key.clone(), n.version) == Some(n.version) {
            // The same value from a replica the key was subscribed at again.
            return;
        }
        if self.pending.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
        }
    }

    /// Closes connection `conn`; its keys are to be subscribed again.
    fn drop_conn(&mut self, conn: u64) {
        if self.conns.remove(&conn).is_none() {
            return;
        }
        let lost: Vec<Blob> = self
            .placed
            .iter()
            .filter(|(_, c)| **c == conn)
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            self.placed.remove(&key);
            self.unplaced.insert(key);
        }
        self.stale_layout = true;
    }

    /// Closes the connections no key is subscribed on.
    fn close_idle(&mut self) {
        let used: HashSet<u64> = self.placed.values().copied().collect();
        self.conns.retain(|id, _| used.contains(id));
    }

    /// The oldest notification not yet handed over.
    fn pop(&mut self) -> Option<Notification> {
        while let Some(key) = self.order.pop_front() {
            if let Some(value) = self.pending.remove(&key) {
                return Some(Notification { key, value });
            }
        }
        None
    }

    /// Ends the subscriptions of `keys`.
    async fn unsubscribe(&mut self, keys: Vec<Blob>) {
        let mut by_conn: HashMap<u64, Vec<Bytes>> = HashMap::new();
        for key in keys {
            self.unplaced.remove(&key);
            self.pending.remove(&key);
            self.versions.remove(&key);
            if let Some(conn) = self.placed.remove(&key) {
                by_conn
                    .entry(conn)
                    .or_default()
                    .push(Bytes::copy_from_slice(&key));
            }
        }
        for (conn, keys) in by_conn {
            if self.conns.contains_key(&conn) {
                // A failure needs nothing more: the server drops a closed connection's
                // subscriptions, and the key is no longer ours to deliver.
                let _ = self
                    .call(conn, ReqOp::Unsubscribe(pb::Unsubscribe { keys }))
                    .await;
            }
        }
        self.close_idle();
    }
}

/// Reads frames from one connection and reports them to the subscription's task, until
/// the connection fails, closes or sends something undecodable.
async fn read_frames(mut stream: ReadHalf<Stream>, conn: u64, events: mpsc::Sender<Event>) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        loop {
            let len = match frame::frame_len(&buf, MAX_FRAME) {
                Ok(Some(len)) => len,
                Ok(None) => break,
                Err(_) => {
                    let _ = events.send(Event::Closed(conn)).await;
                    return;
                }
            };
            let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
            let Ok(resp) = pb::Response::decode(body) else {
                let _ = events.send(Event::Closed(conn)).await;
                return;
            };
            if events
                .send(Event::Frame(conn, Box::new(resp)))
                .await
                .is_err()
            {
                return;
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = events.send(Event::Closed(conn)).await;
                return;
            }
            Ok(_) => {}
        }
    }
}
