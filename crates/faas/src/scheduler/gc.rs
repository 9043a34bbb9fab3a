//! The scheduler's dependency-GC rounds (`cache::gc`; docs/serverless.md,
//! "Dependency-metadata GC").
//!
//! Every period, while caching hosts are connected: sample every storage replica of the
//! keys the round covers (the keys the caches reported last time, and what those keys'
//! values depend on; clocks and dependencies only, `Client::get_many_meta_at`), *then* probe every caching host; each reports what it holds once the
//! fetches it began before the probe have ended. With every report in, the stable clocks
//! (`Round::finish`, closed) go to every caching host. A round is abandoned — nothing
//! learnt, nothing sent — if a caching host connects or disconnects meanwhile, a host
//! declines or sends more than the bounds, a replica cannot be read (that key only is left
//! out), or the reports do not arrive in time.
//!
//! Sound only if every cache that reads these keys is a host of this scheduler. That is
//! checked rather than assumed ([`super::lease`]): a round starts only while no other
//! scheduler holds a lease on the store, and its stable clocks are sent only if none does
//! once the reports are in. Another scheduler's hosts connect to it only after it took its
//! lease; if it took it after that second check, every version its hosts fetch is read
//! after the round's sample of the replicas, hence at or above the floor. While another
//! scheduler is live the rounds pause (logged when that changes, and counted), and resume
//! when its lease ends.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cache::gc::{Holdings, Round, Stable};
use cache::{Key, MultiKeyCausal};
use tokio::sync::{mpsc, watch};

use super::lease::Peers;
use super::{deliver, Outbox, Shared};
use crate::gc::{clocks_from_pb, clocks_to_pb, MAX_GC_KEYS};
use crate::pb;
use crate::placement::HostId;
use crate::values::causal_of;

/// How long a round waits for the hosts' reports.
const REPORT_TIMEOUT: Duration = Duration::from_secs(60);
/// Keys per sampling request to one replica address.
const SAMPLE_BATCH: usize = 1000;

/// The round waiting for reports, as the scheduler's state holds it.
pub(super) struct Waiting {
    id: u64,
    hosts: HashSet<HostId>,
    /// A report (`None`: abandon the round).
    tx: mpsc::UnboundedSender<Option<Holdings>>,
}

impl Waiting {
    /// A host's report for this round (untrusted: bounded, never panics).
    pub(super) fn report(&mut self, host: &HostId, r: &pb::GcReport) {
        if r.round != self.id || !self.hosts.remove(host) {
            return;
        }
        let held = if r.ok { clocks_from_pb(&r.held) } else { None };
        let _ = self.tx.send(held.map(|h| h.into_iter().collect()));
    }

    /// A caching host came or went: the round cannot count it.
    pub(super) fn abandon(self) {
        let _ = self.tx.send(None);
    }
}

/// Runs rounds every `period` until `shutdown`.
pub(super) async fn run(
    shared: Arc<Shared>,
    store: client::Client,
    period: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut stable = Stable::new();
    let mut keys: BTreeSet<Key> = BTreeSet::new();
    let mut next_id = 0;
    let mut peers = Peers::new(shared.id.clone(), shared.config.lease);
    let mut alone = Alone::default();
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        if !alone.check(&shared, &mut peers, &store).await {
            continue;
        }
        next_id += 1;
        let done = round(&shared, &store, &stable, &keys, next_id).await;
        // Checked again with the reports in: a scheduler that took its lease between the
        // first check and the sample could have a host holding a version below the floor.
        if done.is_ok() && !alone.check(&shared, &mut peers, &store).await {
            continue;
        }
        match done {
            Ok((s, next_keys)) => {
                let mut outbox = Outbox::new();
                {
                    let mut st = shared.lock();
                    st.stats.gc_rounds += 1;
                    st.stats.gc_stable_keys = s.len() as u64;
                    let msg = pb::FromScheduler {
                        msg: Some(pb::from_scheduler::Msg::GcStable(pb::GcStable {
                            stable: clocks_to_pb(s.iter().take(MAX_GC_KEYS)),
                        })),
                    };
                    for h in st.caches.keys() {
                        if let Some(out) = st.hosts.get(h) {
                            outbox.push((out.clone(), msg.clone()));
                        }
                    }
                }
                deliver(outbox).await;
                stable = s;
                keys = next_keys;
            }
            Err(why) => {
                tracing::debug!(round = next_id, "dependency GC round abandoned: {why}");
                shared.lock().gc = None;
                // The keys are learnt from reports: keep asking for them.
                if keys.is_empty() {
                    keys = why.keys;
                }
            }
        }
    }
}

/// Whether this scheduler is the only one on the store, as last checked: rounds run only
/// while it is.
#[derive(Default)]
struct Alone {
    /// Why rounds are paused (`None`: they are not), for logging the changes only.
    paused: Option<String>,
}

impl Alone {
    /// True if no other scheduler holds a lease; otherwise counts a skipped round, and
    /// logs when the reason changes.
    async fn check(&mut self, shared: &Shared, peers: &mut Peers, store: &client::Client) -> bool {
        let why = match peers.others(store).await {
            Ok(others) if others.is_empty() => None,
            Ok(others) => Some(format!(
                "another scheduler holds a lease on the store ({}): dependency GC is sound \
                 only with one",
                others.join(", ")
            )),
            Err(e) => Some(format!("the schedulers' leases could not be read: {e}")),
        };
        {
            let mut st = shared.lock();
            st.stats.gc_paused = u64::from(why.is_some());
            if why.is_some() {
                st.stats.gc_skipped += 1;
            }
        }
        if why != self.paused {
            match &why {
                Some(w) => tracing::warn!("dependency GC paused: {w}"),
                None => tracing::info!("dependency GC resumed: no other scheduler is live"),
            }
        }
        let ok = why.is_none();
        self.paused = why;
        ok
    }
}

/// Why a round gave up, and the keys it learnt anyway (the first round of a scheduler
/// has no keys to sample: it learns them from the reports).
struct Abandoned {
    reason: &'static str,
    keys: BTreeSet<Key>,
}

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason)
    }
}

fn abandoned(reason: &'static str) -> Abandoned {
    Abandoned {
        reason,
        keys: BTreeSet::new(),
    }
}

async fn round(
    shared: &Shared,
    store: &client::Client,
    previous: &Stable,
    keys: &BTreeSet<Key>,
    id: u64,
) -> Result<(Stable, BTreeSet<Key>), Abandoned> {
    if shared.lock().caches.is_empty() {
        return Err(abandoned("no caching host"));
    }
    // 1. Sample every replica of every key, before any probe is sent: one request per
    //    replica address and batch of keys (a key by key sample made rounds take seconds
    //    under load, and the lists grow between rounds).
    let mut r = Round::new(previous);
    let mut next: BTreeSet<Key> = BTreeSet::new();
    let layout = store.layout();
    let mut left_out: HashSet<&Key> = HashSet::new();
    let mut by_addr: BTreeMap<String, Vec<&Key>> = BTreeMap::new();
    for key in keys {
        let replicas = layout.replicas(key);
        if replicas.is_empty() {
            left_out.insert(key);
        }
        for rep in replicas {
            match layout.addr(rep) {
                Some(addr) => by_addr.entry(addr.to_string()).or_default().push(key),
                None => {
                    left_out.insert(key);
                }
            }
        }
    }
    let mut sampled: HashMap<&Key, Vec<MultiKeyCausal>> = HashMap::new();
    for (addr, batch) in &by_addr {
        for chunk in batch.chunks(SAMPLE_BATCH) {
            match store.get_many_meta_at(addr, chunk).await {
                Ok(answers) => {
                    for (key, a) in chunk.iter().zip(answers) {
                        match a {
                            Ok(v) => sampled
                                .entry(key)
                                .or_default()
                                .push(v.map(causal_of).unwrap_or_default()),
                            Err(_) => {
                                left_out.insert(key);
                            }
                        }
                    }
                }
                Err(_) => left_out.extend(chunk.iter().copied()),
            }
        }
    }
    for (key, values) in &sampled {
        if left_out.contains(key) {
            continue; // a replica could not be read: the key keeps its clock
        }
        for v in values {
            r.sample(key, v);
            next.extend(v.deps().into_keys());
        }
    }
    // 2. Probe every caching host.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut outbox = Outbox::new();
    let hosts = {
        let mut st = shared.lock();
        let hosts: HashSet<HostId> = st.caches.keys().cloned().collect();
        if hosts.is_empty() {
            return Err(abandoned("no caching host"));
        }
        let msg = pb::FromScheduler {
            msg: Some(pb::from_scheduler::Msg::GcProbe(pb::GcProbe { round: id })),
        };
        for h in &hosts {
            let Some(out) = st.hosts.get(h) else {
                return Err(abandoned("a caching host without a connection"));
            };
            outbox.push((out.clone(), msg.clone()));
        }
        if let Some(old) = st.gc.replace(Waiting {
            id,
            hosts: hosts.clone(),
            tx,
        }) {
            old.abandon();
        }
        hosts.len()
    };
    deliver(outbox).await;
    // 3. Every report, then the closed stable clocks.
    let mut learnt = BTreeSet::new();
    for _ in 0..hosts {
        match tokio::time::timeout(REPORT_TIMEOUT, rx.recv()).await {
            Ok(Some(Some(h))) => {
                learnt.extend(h.iter().map(|(k, _)| k.clone()));
                r.report(&h);
            }
            Ok(Some(None)) => {
                return Err(Abandoned {
                    reason: "a host declined, or caching hosts changed",
                    keys: learnt,
                })
            }
            Ok(None) | Err(_) => {
                return Err(Abandoned {
                    reason: "the reports did not arrive in time",
                    keys: learnt,
                })
            }
        }
    }
    {
        let mut st = shared.lock();
        match st.gc.take() {
            Some(w) if w.id == id && w.hosts.is_empty() => {}
            Some(w) => {
                st.gc = Some(w);
                return Err(abandoned("another round is waiting"));
            }
            None => return Err(abandoned("caching hosts changed")),
        }
    }
    next.extend(learnt);
    next.extend(keys.iter().cloned());
    let next: BTreeSet<Key> = next.into_iter().take(MAX_GC_KEYS).collect();
    Ok((r.finish(), next))
}
