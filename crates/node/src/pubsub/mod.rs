//! Redis pub/sub across the cluster: a node's registry of subscribers ([`Hub`]) and the
//! relay of published messages to the other nodes (`relay`).
//!
//! A subscribing RESP connection registers with its node's hub and gets a bounded queue
//! of `Push`es; PUBLISH on any worker looks up the subscribers of the channel (and of the
//! patterns that match it, see `glob`) under the hub's lock and queues the message for
//! each, then relays it to every other live member of the cluster, whose hub does the same
//! for its own subscribers. Delivery is at most once, nothing is stored: a subscriber
//! connected when a message reaches its node gets it; one on a node the relay cannot reach
//! misses it.
//!
//! # Bounds
//! - Per connection, at most `QUEUE_MESSAGES` messages and `QUEUE_BYTES` bytes queued
//!   and not yet written to the socket. A subscriber that falls further behind is
//!   disconnected (Redis's `client-output-buffer-limit pubsub`): its subscriptions end at
//!   once, and its connection closes, even in the middle of a blocked write.
//! - Per connection, at most `MAX_SUBSCRIPTIONS` channels, patterns and shard channels.
//! - Relays in flight: see `relay`.

pub(crate) mod events;
pub(crate) mod relay;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};

/// Most messages queued for one subscriber.
pub(crate) const QUEUE_MESSAGES: usize = 16_384;
/// Most bytes (channels, patterns and payloads) queued for one subscriber: Redis's default
/// hard limit for pub/sub clients.
pub(crate) const QUEUE_BYTES: usize = 32 << 20;
/// Most subscriptions (channels + patterns + shard channels) of one connection.
pub(crate) const MAX_SUBSCRIPTIONS: usize = 100_000;

/// What a subscription is to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// SUBSCRIBE: one channel.
    Channel,
    /// PSUBSCRIBE: every channel matching a glob pattern.
    Pattern,
    /// SSUBSCRIBE: one shard channel (SPUBLISH's namespace).
    Shard,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Channel => 0,
            Kind::Pattern => 1,
            Kind::Shard => 2,
        }
    }
}

/// A message for one subscriber.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Push {
    /// The pattern it matched (a `pmessage`), if any.
    pub(crate) pattern: Option<Bytes>,
    /// The channel it was published on.
    pub(crate) channel: Bytes,
    /// The payload.
    pub(crate) data: Bytes,
    /// Published with SPUBLISH (an `smessage`).
    pub(crate) sharded: bool,
}

impl Push {
    fn size(&self) -> usize {
        self.pattern.as_ref().map_or(0, |p| p.len()) + self.channel.len() + self.data.len() + 64
    }
}

/// A subscriber's side of its queue: bytes waiting, and whether it was disconnected.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    bytes: AtomicUsize,
    killed: AtomicBool,
    kill: Notify,
}

impl Gauge {
    /// True once the subscriber fell too far behind.
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Waits until the subscriber is disconnected.
    pub(crate) async fn wait_killed(&self) {
        while !self.killed() {
            self.kill.notified().await;
        }
    }

    /// A push of `push.size()` bytes was taken from the queue.
    pub(crate) fn taken(&self, push: &Push) {
        self.bytes.fetch_sub(push.size(), Ordering::AcqRel);
    }

    fn mark_killed(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill.notify_one();
    }
}

struct Subscriber {
    tx: mpsc::Sender<Push>,
    gauge: Arc<Gauge>,
    /// Its subscriptions, by [`Kind::index`].
    subs: [HashSet<Bytes>; 3],
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    subscribers: HashMap<u64, Subscriber>,
    /// Subscribers of each channel / pattern / shard channel, by [`Kind::index`].
    by_name: [HashMap<Bytes, HashSet<u64>>; 3],
}

/// A node's pub/sub registry, shared by its workers.
#[derive(Default)]
pub struct Hub {
    inner: Mutex<Inner>,
    /// Relays to other nodes started and not yet answered.
    pub(crate) relays_in_flight: AtomicUsize,
    /// Relays not sent because too many were in flight, or that failed.
    pub(crate) relays_dropped: AtomicU64,
    /// Subscribers disconnected for falling behind.
    pub(crate) slow_disconnects: AtomicU64,
    /// Peer connections for relays, by peer address.
    pub(crate) peers: Mutex<HashMap<String, relay::PeerSlot>>,
    /// The node's `notify-keyspace-events` (`CONFIG SET`), read by its shards.
    pub(crate) keyspace: Arc<crate::notify::Flags>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

/// Why a subscription was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubscribeError {
    /// The connection holds [`MAX_SUBSCRIPTIONS`] already.
    #[error("ERR max number of subscriptions per connection ({MAX_SUBSCRIPTIONS}) reached")]
    TooMany,
    /// The connection was disconnected for falling behind.
    #[error("ERR the connection fell behind its pub/sub output limit")]
    Killed,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing pub/sub altogether.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a subscriber: its id, its queue and its gauge.
    pub(crate) fn register(&self) -> (u64, mpsc::Receiver<Push>, Arc<Gauge>) {
        let (tx, rx) = mpsc::channel(QUEUE_MESSAGES);
        let gauge = Arc::new(Gauge::default());
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.subscribers.insert(
            id,
            Subscriber {
                tx,
                gauge: gauge.clone(),
                subs: Default::default(),
            },
        );
        (id, rx, gauge)
    }

    /// Subscribes `id` to `name`; returns its number of subscriptions of `kind`'s family
    /// (channels + patterns, or shard channels) afterwards, as Redis counts them.
    pub(crate) fn subscribe(
        &self,
        id: u64,
        kind: Kind,
        name: &Bytes,
    ) -> Result<usize, SubscribeError> {
        let mut inner = self.lock();
        let Some(s) = inner.subscribers.get_mut(&id) else {
            return Err(SubscribeError::Killed);
        };
        let total: usize = s.subs.iter().map(HashSet::len).sum();
        if !s.subs[kind.index()].contains(name) {
            if total >= MAX_SUBSCRIPTIONS {
                return Err(SubscribeError::TooMany);
            }
            s.subs[kind.index()].insert(name.clone());
        }
        let count = count_of(&s.subs, kind);
        inner.by_name[kind.index()]
            .entry(name.clone())
            .or_default()
            .insert(id);
        Ok(count)
    }

    /// Unsubscribes `id` from `name`; returns its count afterwards (as [`Hub::subscribe`]).
    pub(crate) fn unsubscribe(&self, id: u64, kind: Kind, name: &[u8]) -> usize {
        let mut inner = self.lock();
        let Some(s) = inner.subscribers.get_mut(&id) else {
            return 0;
        };
        s.subs[kind.index()].remove(name);
        let count = count_of(&s.subs, kind);
        forget(&mut inner.by_name[kind.index()], name, id);
        count
    }

    /// The names `id` is subscribed to with `kind`.
    pub(crate) fn names(&self, id: u64, kind: Kind) -> Vec<Bytes> {
        let inner = self.lock();
        inner
            .subscribers
            .get(&id)
            .map(|s| s.subs[kind.index()].iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `id`'s number of subscriptions of `kind`'s family (as [`Hub::subscribe`]).
    pub(crate) fn count(&self, id: u64, kind: Kind) -> usize {
        let inner = self.lock();
        inner
            .subscribers
            .get(&id)
            .map_or(0, |s| count_of(&s.subs, kind))
    }

    /// Ends every subscription of `id` and forgets it.
    pub(crate) fn close(&self, id: u64) {
        let mut inner = self.lock();
        remove_subscriber(&mut inner, id);
    }

    /// Queues a message published on `channel` (a shard channel if `sharded`) for this
    /// node's subscribers; returns how many received it (a subscriber counts once per
    /// subscription that matches, as in Redis). Subscribers whose queue is full are
    /// disconnected.
    pub(crate) fn publish(&self, channel: &Bytes, data: &Bytes, sharded: bool) -> usize {
        let mut inner = self.lock();
        let mut targets: Vec<(u64, Option<Bytes>)> = Vec::new();
        let kind = if sharded { Kind::Shard } else { Kind::Channel };
        if let Some(ids) = inner.by_name[kind.index()].get(&channel[..]) {
            targets.extend(ids.iter().map(|&id| (id, None)));
        }
        if !sharded {
            for (pattern, ids) in &inner.by_name[Kind::Pattern.index()] {
                if crate::glob::matches(pattern, channel) {
                    targets.extend(ids.iter().map(|&id| (id, Some(pattern.clone()))));
                }
            }
        }
        let mut received = 0;
        let mut slow = Vec::new();
        for (id, pattern) in targets {
            let Some(s) = inner.subscribers.get(&id) else {
                continue;
            };
            let push = Push {
                pattern,
                channel: channel.clone(),
                data: data.clone(),
                sharded,
            };
            let size = push.size();
            let before = s.gauge.bytes.fetch_add(size, Ordering::AcqRel);
            if before + size > QUEUE_BYTES || s.tx.try_send(push).is_err() {
                s.gauge.bytes.fetch_sub(size, Ordering::AcqRel);
                slow.push(id);
                continue;
            }
            received += 1;
        }
        for id in slow {
            if let Some(s) = inner.subscribers.get(&id) {
                s.gauge.mark_killed();
                self.slow_disconnects.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    id,
                    "a pub/sub subscriber fell behind its output limit: disconnected"
                );
            }
            remove_subscriber(&mut inner, id);
        }
        received
    }

    /// The active channels (shard channels if `sharded`): those with a subscriber,
    /// matching `pattern` if given.
    pub(crate) fn channels(&self, pattern: Option<&[u8]>, sharded: bool) -> Vec<Bytes> {
        let kind = if sharded { Kind::Shard } else { Kind::Channel };
        let inner = self.lock();
        inner.by_name[kind.index()]
            .keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::matches(p, c)))
            .cloned()
            .collect()
    }

    /// The number of subscribers of `channel` (a shard channel if `sharded`), patterns
    /// not counted.
    pub(crate) fn numsub(&self, channel: &[u8], sharded: bool) -> usize {
        let kind = if sharded { Kind::Shard } else { Kind::Channel };
        self.lock().by_name[kind.index()]
            .get(channel)
            .map_or(0, HashSet::len)
    }

    /// `id`'s channels, patterns and shard channels, counted apart (`CLIENT LIST`'s `sub`,
    /// `psub`, `ssub`).
    pub(crate) fn counts(&self, id: u64) -> [usize; 3] {
        let inner = self.lock();
        inner.subscribers.get(&id).map_or([0; 3], |s| {
            [s.subs[0].len(), s.subs[1].len(), s.subs[2].len()]
        })
    }

    /// The number of distinct patterns subscribed to.
    pub(crate) fn numpat(&self) -> usize {
        self.lock().by_name[Kind::Pattern.index()].len()
    }
}

/// A subscriber's count as Redis reports it: channels + patterns, or shard channels.
fn count_of(subs: &[HashSet<Bytes>; 3], kind: Kind) -> usize {
    match kind {
        Kind::Shard => subs[Kind::Shard.index()].len(),
        _ => subs[Kind::Channel.index()].len() + subs[Kind::Pattern.index()].len(),
    }
}

fn forget(map: &mut HashMap<Bytes, HashSet<u64>>, name: &[u8], id: u64) {
    if let Some(ids) = map.get_mut(name) {
        ids.remove(&id);
        if ids.is_empty() {
            map.remove(name);
        }
    }
}

fn remove_subscriber(inner: &mut Inner, id: u64) {
    if let Some(s) = inner.subscribers.remove(&id) {
        for (i, names) in s.subs.iter().enumerate() {
            for name in names {
                forget(&mut inner.by_name[i], name, id);
            }
        }
    }
}

#[cfg(test)]
mod tests;
