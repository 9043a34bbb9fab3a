//! Keyspace notifications on the pub/sub fan-out: the events a worker's shard recorded
//! ([`crate::notify`]) become messages on `__keyspace@0__:<key>` and
//! `__keyevent@0__:<event>`, delivered to this node's subscribers and relayed to the other
//! nodes' like any `PUBLISH` (at most once, see the module docs of [`super`]).

use std::rc::Rc;

use crate::driver::worker::Worker;
use crate::notify::{self, KeyEvent};

/// Publishes `events` under the node's current flags (none if they were turned off since
/// the events were recorded).
pub(crate) fn publish(w: &Rc<Worker>, events: Vec<KeyEvent>) {
    let hub = &w.shared.pubsub;
    let flags = hub.keyspace.active();
    if flags == 0 {
        return;
    }
    for e in &events {
        for (channel, message) in notify::messages(flags, e) {
            hub.publish(&channel, &message, false);
            super::relay::publish(w, &channel, &message, false);
        }
    }
}

/// Publishes the events of a command that runs as several quiet ops (`RENAME`, `COPY`)
/// and names its events itself: `(event, key)` pairs of `class`, from the connection's
/// worker, if the node's flags ask for them.
pub(crate) fn publish_command(w: &Rc<Worker>, class: u32, events: &[(&'static str, &[u8])]) {
    if w.shared.pubsub.keyspace.active() & class == 0 {
        return;
    }
    let events = events
        .iter()
        .map(|&(event, key)| KeyEvent {
            event,
            key: bytes::Bytes::copy_from_slice(key),
        })
        .collect();
    publish(w, events);
}
