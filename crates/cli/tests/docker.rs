//! The partition test, in containers: three `latticekv server` nodes in Docker (a
//! `FROM scratch` image of the static binary), one of them cut off from the others for 30 s
//! while both sides keep taking writes, then reconnected. Every replica — every node's
//! worker holding a key, read locally — must converge on every acknowledged write.
//!
//! Ignored by a plain `cargo test`: it needs Docker and the image. `make docker-test`
//! (`tests/docker/run.sh`) builds the static binary and the image, runs this test with
//! `LATTICEKV_DOCKER_IMAGE` set, and removes what it created. See `docs/cluster-testing.md`.
//!
//! Layout of a run (names carry a unique run id; everything is labelled with it):
//! - a "cluster" bridge network: the nodes' peer traffic. Each node binds `0.0.0.0` and
//!   advertises its fixed IP on this network (`--advertise`), so every address the nodes
//!   publish is on it.
//! - a "client" bridge network: the test (on the host) talks to every node through it, so
//!   it can still write to and inspect the isolated node during the partition. Docker's
//!   isolation rules drop traffic between two bridge networks, so the nodes cannot reach
//!   each other through it (the test checks that the partition is real: each side declares
//!   the other dead).
//! - the partition: `docker network disconnect` of one node from the cluster network, and
//!   `docker network connect --ip` with the same address 30 s later.
//!
//! Writes go to each node's RESP port (unique keys with known values, counter increments and
//! set adds on shared keys from both sides). A write is *acknowledged* when the node
//! answered it; a write that got an error or no answer is *uncertain* (it may or may not
//! have been applied). After the heal the test waits, bounded, until on every node the
//! worker that holds each key has — read locally with `Fetch`, which never forwards — the
//! exact value the acknowledged writes imply: unique keys their value, counters the sum of
//! their acknowledged increments (plus at most the uncertain ones), sets every acknowledged
//! member (and only acknowledged or uncertain ones), and every replica the same record.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::routing::Layout;
use lattice::{Record, Value};
use prost::Message;
use wire::pb::{self, request::Op, response::Result as R};

/// Image to run (built by `docker/build-image.sh`).
const IMAGE_ENV: &str = "LATTICEKV_DOCKER_IMAGE";
/// Run id used in names and labels (`tests/docker/run.sh` sets it; else one is made up).
const RUN_ENV: &str = "LATTICEKV_DOCKER_RUN";
/// Length of the partition in seconds (default 30).
const PARTITION_ENV: &str = "LATTICEKV_DOCKER_PARTITION_SECS";

const NODES: usize = 3;
const WORKERS: u16 = 2;
const FRONT_PORT: u16 = 7700;
const RESP_PORT: u16 = 6380;
/// The node cut off (1-based). Node 1 is the bootstrap node: it has no seeds, so after the
/// partition nobody is configured to contact it — the hardest case for rejoining.
const ISOLATED: usize = 1;
/// Failure timeout of the nodes (the default).
const FAILURE_TIMEOUT_MS: u64 = 5_000;
/// Shared counters and sets written from both sides.
const SHARED_KEYS: usize = 4;
/// Bound on the wait for convergence after the heal.
const CONVERGE_WITHIN: Duration = Duration::from_secs(90);

// ---- docker -------------------------------------------------------------------------------

/// Runs `docker ARGS`; its trimmed stdout, or an error with its stderr.
fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn docker_ok(args: &[&str]) -> String {
    docker(args).unwrap_or_else(|e| panic!("{e}"))
}

/// One node's container and addresses.
struct NodeBox {
    name: String,
    /// Its address on the cluster network (advertised).
    cluster_ip: String,
    /// Its address on the client network (what the test uses).
    client_ip: String,
}

impl NodeBox {
    fn front(&self) -> SocketAddr {
        format!("{}:{FRONT_PORT}", self.client_ip).parse().unwrap()
    }
    fn resp(&self) -> SocketAddr {
        format!("{}:{RESP_PORT}", self.client_ip).parse().unwrap()
    }
    fn workers(&self) -> Vec<SocketAddr> {
        (1..=WORKERS)
            .map(|i| {
                format!("{}:{}", self.client_ip, FRONT_PORT + i)
                    .parse()
                    .unwrap()
            })
            .collect()
    }
    /// The peer port (the default: front port + 10000), on the client network.
    fn peer(&self) -> SocketAddr {
        format!("{}:{}", self.client_ip, FRONT_PORT + 10_000)
            .parse()
            .unwrap()
    }
    fn advertised_front(&self) -> String {
        format!("{}:{FRONT_PORT}", self.cluster_ip)
    }
}

/// The networks and containers of one run; removed on drop, whatever happened.
struct Harness {
    run: String,
    cluster_net: String,
    client_net: String,
    nodes: Vec<NodeBox>,
}

impl Harness {
    fn label(&self) -> String {
        format!("latticekv.test={}", self.run)
    }

    /// Creates a bridge network on a free random /24; returns its "a.b.c" prefix.
    fn network(run: &str, name: &str) -> String {
        let mut last = String::new();
        for _ in 0..20 {
            let prefix = format!("10.{}.{}", fastrand::u8(100..=250), fastrand::u8(..));
            let subnet = format!("{prefix}.0/24");
            match docker(&[
                "network",
                "create",
                "--driver",
                "bridge",
                "--subnet",
                &subnet,
                "--label",
                &format!("latticekv.test={run}"),
                name,
            ]) {
                Ok(_) => return prefix,
                Err(e) => last = e,
            }
        }
        panic!("cannot create network {name}: {last}");
    }

    fn start(image: &str, run: &str) -> Harness {
        let cluster_net = format!("{run}-cluster");
        let client_net = format!("{run}-client");
        let mut h = Harness {
            run: run.to_string(),
            cluster_net: cluster_net.clone(),
            client_net: client_net.clone(),
            nodes: Vec::new(),
        };
        // From here on, a panic drops `h`, which removes whatever was created.
        let cluster_prefix = Self::network(run, &cluster_net);
        let client_prefix = Self::network(run, &client_net);
        let seed = format!("{cluster_prefix}.11:{FRONT_PORT}");
        for i in 1..=NODES {
            let node = NodeBox {
                name: format!("{run}-n{i}"),
                cluster_ip: format!("{cluster_prefix}.{}", 10 + i),
                client_ip: format!("{client_prefix}.{}", 10 + i),
            };
            let id = format!("n{i}");
            let workers = WORKERS.to_string();
            let failure = FAILURE_TIMEOUT_MS.to_string();
            let label = h.label();
            let mut args: Vec<&str> = vec![
                "run",
                "-d",
                "--name",
                &node.name,
                "--label",
                &label,
                "--network",
                &cluster_net,
                "--ip",
                &node.cluster_ip,
                "-e",
                "LATTICEKV_LOG=info",
                image,
                "server",
                "--no-leave",
                "--node-id",
                &id,
                "--listen",
                "0.0.0.0:7700",
                "--resp",
                "0.0.0.0:6380",
                "--advertise",
                &node.cluster_ip,
                "--workers",
                &workers,
                "--replication",
                "3",
                "--failure-timeout-ms",
                &failure,
                "--anti-entropy-ms",
                "5000",
                // The nodes bind 0.0.0.0 on the test's private bridge networks; the test
                // drives them with raw protocol clients that don't authenticate.
                "--insecure-no-auth",
            ];
            if i > 1 {
                args.extend(["--seeds", &seed]);
            }
            let (name, client_ip) = (node.name.clone(), node.client_ip.clone());
            // Registered first: if `docker run` fails half-way, drop still removes it.
            h.nodes.push(NodeBox {
                name: name.clone(),
                cluster_ip: node.cluster_ip.clone(),
                client_ip: client_ip.clone(),
            });
            docker_ok(&args);
            docker_ok(&["network", "connect", "--ip", &client_ip, &client_net, &name]);
        }
        h
    }

    fn node(&self, i: usize) -> &NodeBox {
        &self.nodes[i - 1]
    }

    fn disconnect(&self, i: usize) {
        docker_ok(&[
            "network",
            "disconnect",
            &self.cluster_net,
            &self.node(i).name,
        ]);
    }

    fn reconnect(&self, i: usize) {
        let n = self.node(i);
        docker_ok(&[
            "network",
            "connect",
            "--ip",
            &n.cluster_ip,
            &self.cluster_net,
            &n.name,
        ]);
    }

    /// The last lines of every node's log, for a failure report.
    fn logs(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let logs = Command::new("docker")
                .args(["logs", "--tail", "60", &n.name])
                .output()
                .map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .unwrap_or_else(|e| e.to_string());
            out.push_str(&format!("---- {} ----\n{logs}\n", n.name));
        }
        out
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for n in &self.nodes {
            if let Err(e) = docker(&["rm", "-f", "-v", &n.name]) {
                eprintln!("cleanup: {e}");
            }
        }
        for net in [&self.cluster_net, &self.client_net] {
            if let Err(e) = docker(&["network", "rm", net]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

// ---- talking to nodes -----------------------------------------------------------------------

/// One native-protocol request on a fresh connection, with timeouts; errors as values.
fn native_call(addr: SocketAddr, op: Op) -> Result<pb::Response, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| s.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    wire::frame::encode(
        &pb::Request {
            id: 1,
            op: Some(op),
            ..Default::default()
        },
        &mut out,
    );
    s.write_all(&out).map_err(|e| format!("{addr}: {e}"))?;
    let mut header = [0u8; 4];
    s.read_exact(&mut header)
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    s.read_exact(&mut body)
        .map_err(|e| format!("{addr}: {e}"))?;
    pb::Response::decode(&body[..]).map_err(|e| format!("{addr}: {e}"))
}

fn topology(addr: SocketAddr) -> Result<pb::Topology, String> {
    match native_call(addr, Op::Topology(pb::GetTopology::default()))?.result {
        Some(R::Topology(t)) => Ok(t),
        other => Err(format!("{addr}: topology answered {other:?}")),
    }
}

fn status(addr: SocketAddr) -> Result<pb::Status, String> {
    match native_call(addr, Op::Status(pb::GetStatus {}))?.result {
        Some(R::Status(s)) => Ok(s),
        other => Err(format!("{addr}: status answered {other:?}")),
    }
}

/// What a node thinks of each member: id → status.
fn member_statuses(addr: SocketAddr) -> Result<BTreeMap<String, pb::NodeStatus>, String> {
    Ok(topology(addr)?
        .members
        .iter()
        .filter(|m| m.role == "memory")
        .map(|m| {
            (
                m.node_id.clone(),
                pb::NodeStatus::try_from(m.status).unwrap_or(pb::NodeStatus::Left),
            )
        })
        .collect())
}

fn all_alive(addr: SocketAddr) -> bool {
    member_statuses(addr)
        .is_ok_and(|m| m.len() == NODES && m.values().all(|s| *s == pb::NodeStatus::Alive))
}

/// Worker `worker`'s own records of `keys`: a `Fetch` over the node's peer port, as another
/// node would send it (it reads the worker's store: no routing, no forwarding, no repair).
fn fetch_local(
    peer: SocketAddr,
    worker: u32,
    keys: &[String],
) -> Result<HashMap<String, Record>, String> {
    let mut s = TcpStream::connect_timeout(&peer, Duration::from_secs(2))
        .map_err(|e| format!("{peer}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| s.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| e.to_string())?;
    let frame = |msg: &dyn Fn(&mut Vec<u8>), s: &mut TcpStream| -> Result<(), String> {
        let mut out = Vec::new();
        msg(&mut out);
        s.write_all(&out).map_err(|e| format!("{peer}: {e}"))
    };
    let read = |s: &mut TcpStream| -> Result<Vec<u8>, String> {
        let mut header = [0u8; 4];
        s.read_exact(&mut header)
            .map_err(|e| format!("{peer}: {e}"))?;
        let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
        s.read_exact(&mut body)
            .map_err(|e| format!("{peer}: {e}"))?;
        Ok(body)
    };
    let hello = pb::PeerHello {
        version: 1,
        node_id: "docker-test".into(),
        from_worker: Some(0),
        to_worker: Some(worker),
        ..Default::default()
    };
    frame(&|o| wire::frame::encode(&hello, o), &mut s)?;
    let welcome = pb::PeerWelcome::decode(&read(&mut s)?[..]).map_err(|e| e.to_string())?;
    if let Some(e) = welcome.error {
        return Err(format!("{peer}: hello refused: {}", e.message));
    }
    let mut out = HashMap::new();
    for (i, chunk) in keys.chunks(2_000).enumerate() {
        let req = pb::PeerRequest {
            id: i as u64 + 1,
            msg: Some(pb::peer_request::Msg::Fetch(pb::Fetch {
                keys: chunk.iter().map(|k| k.clone().into()).collect(),
            })),
        };
        frame(&|o| wire::frame::encode(&req, o), &mut s)?;
        let resp = pb::PeerResponse::decode(&read(&mut s)?[..]).map_err(|e| e.to_string())?;
        let Some(pb::peer_response::Result::Records(records)) = resp.result else {
            return Err(format!(
                "{peer}/{worker}: Fetch did not answer with records"
            ));
        };
        for e in records.entries {
            let key = String::from_utf8_lossy(&e.key).into_owned();
            let record = e
                .record
                .as_ref()
                .ok_or_else(|| format!("{peer}: entry without a record"))
                .and_then(|r| {
                    wire::convert::record_from_pb(r).map_err(|e| format!("{peer}: {e}"))
                })?;
            out.insert(key, record);
        }
    }
    Ok(out)
}

/// A minimal blocking RESP client for the writers.
struct RespConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RespConn {
    fn connect(addr: SocketAddr) -> std::io::Result<RespConn> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        // Longer than the nodes' own peer timeout (5 s), so a write the node gives up on
        // comes back as its error rather than as our timeout.
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.set_nodelay(true)?;
        Ok(RespConn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Sends a command; its one-line reply (`+OK`, `:n`, `-ERR …`).
    fn command(&mut self, args: &[&[u8]]) -> std::io::Result<String> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out)?;
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("connection closed"));
        }
        Ok(line.trim_end().to_string())
    }
}

// ---- the writers and their ledger ----------------------------------------------------------

/// Phases of the run, for the report.
const PHASE_BEFORE: u8 = 0;
const PHASE_PARTITION: u8 = 1;
const PHASE_HEALED: u8 = 2;

/// How a write ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    /// The node answered it.
    Acked,
    /// An error or no answer: it may or may not have been applied.
    Uncertain,
}

/// Everything one writer did.
#[derive(Default)]
struct Ledger {
    /// Unique key → (value, outcome).
    unique: BTreeMap<String, (String, Outcome)>,
    /// Counter key → (sum of acknowledged increments, sum of uncertain ones).
    counters: BTreeMap<String, (i128, i128)>,
    /// Set key → members by outcome.
    sets: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>,
    /// Acknowledged and uncertain writes per phase.
    per_phase: [[u64; 2]; 3],
    /// The first few errors, for the report.
    errors: Vec<String>,
    /// Writes that took more than a second: (node, key, seconds, reply), for the report.
    slow: Vec<String>,
}

impl Ledger {
    fn merge(&mut self, other: Ledger) {
        self.unique.extend(other.unique);
        for (k, (a, u)) in other.counters {
            let e = self.counters.entry(k).or_default();
            e.0 += a;
            e.1 += u;
        }
        for (k, (a, u)) in other.sets {
            let e = self.sets.entry(k).or_default();
            e.0.extend(a);
            e.1.extend(u);
        }
        for (p, counts) in other.per_phase.iter().enumerate() {
            self.per_phase[p][0] += counts[0];
            self.per_phase[p][1] += counts[1];
        }
        self.errors.extend(other.errors.into_iter().take(5));
        self.slow.extend(other.slow.into_iter().take(10));
    }

    fn keys(&self) -> Vec<String> {
        self.unique
            .keys()
            .chain(self.counters.keys())
            .chain(self.sets.keys())
            .cloned()
            .collect()
    }
}

/// Writes to one node's RESP port until `stop`: a unique key, a counter increment, a set
/// add, in turn.
fn writer(node: usize, addr: SocketAddr, phase: Arc<AtomicU8>, stop: Arc<AtomicBool>) -> Ledger {
    let mut ledger = Ledger::default();
    let mut conn: Option<RespConn> = None;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let p = phase.load(Ordering::Relaxed);
        if conn.is_none() {
            match RespConn::connect(addr) {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    if ledger.errors.len() < 5 {
                        ledger.errors.push(format!("n{node} connect: {e}"));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let started = Instant::now();
        let shared = format!("{}", seq as usize % SHARED_KEYS);
        let (key, reply, expect_ok): (String, std::io::Result<String>, fn(&str) -> bool) =
            match seq % 3 {
                0 => {
                    let key = format!("u:n{node}:{seq}");
                    let value = format!("v:n{node}:{seq}:p{p}");
                    let r = c.command(&[b"SET", key.as_bytes(), value.as_bytes()]);
                    let ok = matches!(&r, Ok(l) if l == "+OK");
                    ledger.unique.insert(
                        key.clone(),
                        (
                            value,
                            if ok {
                                Outcome::Acked
                            } else {
                                Outcome::Uncertain
                            },
                        ),
                    );
                    (key, r, |l| l == "+OK")
                }
                1 => {
                    let key = format!("ctr:{shared}");
                    let delta = 1 + (seq % 7) as i128;
                    let r = c.command(&[b"INCRBY", key.as_bytes(), delta.to_string().as_bytes()]);
                    let ok = matches!(&r, Ok(l) if l.starts_with(':'));
                    let e = ledger.counters.entry(key.clone()).or_default();
                    if ok {
                        e.0 += delta;
                    } else {
                        e.1 += delta;
                    }
                    (key, r, |l| l.starts_with(':'))
                }
                _ => {
                    let key = format!("set:{shared}");
                    let member = format!("m:n{node}:{seq}");
                    let r = c.command(&[b"SADD", key.as_bytes(), member.as_bytes()]);
                    let ok = matches!(&r, Ok(l) if l.starts_with(':'));
                    let e = ledger.sets.entry(key.clone()).or_default();
                    if ok {
                        e.0.insert(member);
                    } else {
                        e.1.insert(member);
                    }
                    (key, r, |l| l.starts_with(':'))
                }
            };
        let ok = matches!(&reply, Ok(l) if expect_ok(l));
        let took = started.elapsed();
        if took > Duration::from_secs(1) && ledger.slow.len() < 10 {
            ledger.slow.push(format!(
                "n{node} phase {p} {key}: {:.1} s, {reply:?}",
                took.as_secs_f64()
            ));
        }
        ledger.per_phase[p as usize][usize::from(!ok)] += 1;
        if !ok {
            if ledger.errors.len() < 5 {
                ledger
                    .errors
                    .push(format!("n{node} phase {p} {key}: {reply:?}"));
            }
            if reply.is_err() {
                conn = None;
            }
        }
        // A steady, moderate rate: a few thousand keys in all.
        std::thread::sleep(Duration::from_millis(5));
    }
    ledger
}

// ---- convergence check ----------------------------------------------------------------------

/// Checks one replica's record of `key` against what the writes imply.
fn check_record(key: &str, record: Option<&Record>, ledger: &Ledger) -> Result<(), String> {
    let value = record.and_then(|r| r.value.as_ref());
    if let Some((expected, outcome)) = ledger.unique.get(key) {
        return match (value, outcome) {
            (Some(Value::Lww(l)), _) if l.value[..] == *expected.as_bytes() => Ok(()),
            (None, Outcome::Uncertain) => Ok(()),
            (other, _) => Err(format!("{key}: expected {expected:?}, holds {other:?}")),
        };
    }
    if let Some(&(acked, uncertain)) = ledger.counters.get(key) {
        let n = match value {
            Some(Value::Counter(c)) => c.value(),
            None => 0,
            other => return Err(format!("{key}: expected a counter, holds {other:?}")),
        };
        return if acked <= n && n <= acked + uncertain {
            Ok(())
        } else {
            Err(format!(
                "{key}: counter is {n}, acknowledged increments sum to {acked} \
                 (+ up to {uncertain} uncertain)"
            ))
        };
    }
    if let Some((acked, uncertain)) = ledger.sets.get(key) {
        let members: BTreeSet<String> = match value {
            Some(Value::OrSet(s)) => s
                .iter()
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .collect(),
            None => BTreeSet::new(),
            other => return Err(format!("{key}: expected a set, holds {other:?}")),
        };
        let missing: Vec<&String> = acked.difference(&members).take(5).collect();
        if !missing.is_empty() {
            return Err(format!(
                "{key}: {} acknowledged members missing, e.g. {missing:?}",
                acked.difference(&members).count()
            ));
        }
        let unknown: Vec<&String> = members
            .iter()
            .filter(|m| !acked.contains(*m) && !uncertain.contains(*m))
            .take(5)
            .collect();
        if !unknown.is_empty() {
            return Err(format!("{key}: members nobody wrote: {unknown:?}"));
        }
        return Ok(());
    }
    Err(format!("{key}: not in the ledger"))
}

/// One full check of every replica of every key. `Ok` once converged; else the first few
/// problems.
fn converged(h: &Harness, ledger: &Ledger, keys: &[String]) -> Result<(), String> {
    // Everyone sees everyone alive.
    for n in &h.nodes {
        let m = member_statuses(n.front())?;
        if m.len() != NODES || m.values().any(|s| *s != pb::NodeStatus::Alive) {
            return Err(format!("{} sees {m:?}", n.name));
        }
    }
    // Placement as the (isolated) node computes it: advertised worker address → replica.
    let layout = Layout::from_topology(&topology(h.node(ISOLATED).front())?);
    if layout.nodes() != NODES {
        return Err(format!("layout has {} nodes", layout.nodes()));
    }
    let mut problems = Vec::new();
    let mut records: HashMap<&str, Vec<Record>> = HashMap::new();
    for n in &h.nodes {
        let mut held: Vec<HashMap<String, Record>> = Vec::new();
        for w in 0..WORKERS as u32 {
            held.push(fetch_local(n.peer(), w, keys)?);
        }
        for key in keys {
            // The worker of this node that holds the key (one: local replication 1).
            let expected: Vec<usize> = layout
                .replicas(key.as_bytes())
                .into_iter()
                .filter_map(|r| layout.addr(r))
                .filter_map(|a| a.strip_prefix(&format!("{}:", n.cluster_ip)))
                .filter_map(|port| port.parse::<u16>().ok())
                .map(|port| usize::from(port - FRONT_PORT - 1))
                .collect();
            if expected.len() != 1 {
                problems.push(format!("{key}: {} replicas on {}", expected.len(), n.name));
                continue;
            }
            let w = expected[0];
            let record = held[w].get(key);
            if let Err(e) = check_record(key, record, ledger) {
                problems.push(format!("{} worker {w}: {e}", n.name));
            }
            for (other, map) in held.iter().enumerate() {
                if other != w && map.contains_key(key) {
                    problems.push(format!(
                        "{key}: {} worker {other} still stores it (not its replica)",
                        n.name
                    ));
                }
            }
            if let Some(r) = record {
                records.entry(key).or_default().push(r.clone());
            }
        }
    }
    for (key, rs) in &records {
        if rs.len() != NODES || rs.iter().any(|r| r != &rs[0]) {
            problems.push(format!(
                "{key}: the {} replicas holding it differ",
                rs.len()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let n = problems.len();
        problems.truncate(8);
        Err(format!("{n} problems, e.g.:\n  {}", problems.join("\n  ")))
    }
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ---- the test -------------------------------------------------------------------------------

// Ignored by a plain `cargo test` only because it needs the FROM-scratch image, which
// tests/docker/run.sh builds first; `make test` runs it through `make docker-test`
// (`--ignored`), so CI always runs it.
#[test]
#[ignore = "needs Docker and the image; run with `make docker-test`"]
fn a_partitioned_node_rejoins_and_every_replica_converges() {
    let image = std::env::var(IMAGE_ENV).unwrap_or_else(|_| {
        panic!(
            "{IMAGE_ENV} is not set: run this test with `make docker-test`, which builds the image"
        )
    });
    let run = std::env::var(RUN_ENV)
        .unwrap_or_else(|_| format!("lkvtest-{}-{}", std::process::id(), fastrand::u32(..)));
    let partition = Duration::from_secs(
        std::env::var(PARTITION_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let t0 = Instant::now();
    let log = |msg: &str| eprintln!("[{:6.1} s] {msg}", t0.elapsed().as_secs_f64());

    let h = Harness::start(&image, &run);
    log("containers started");
    for n in &h.nodes {
        assert!(
            wait_until(Duration::from_secs(60), || all_alive(n.front())),
            "{} did not see {NODES} alive members: {:?}",
            n.name,
            member_statuses(n.front())
        );
    }
    log("cluster formed: every node sees 3 alive members");

    // Every address a node publishes is its advertised address on the cluster network.
    for n in &h.nodes {
        let t = topology(n.front()).expect("topology");
        let expected_workers: Vec<String> = (1..=WORKERS)
            .map(|i| format!("{}:{}", n.cluster_ip, FRONT_PORT + i))
            .collect();
        assert_eq!(t.workers, expected_workers, "{}: topology workers", n.name);
        for m in &t.members {
            let index: usize = m.node_id[1..].parse().expect("members are n1, n2, n3");
            let peer = h.node(index);
            assert_eq!(
                m.front,
                peer.advertised_front(),
                "{} as seen by {}",
                m.node_id,
                n.name
            );
            assert_eq!(m.resp, format!("{}:{RESP_PORT}", peer.cluster_ip));
            assert!(
                m.workers
                    .iter()
                    .all(|w| w.starts_with(&format!("{}:", peer.cluster_ip))),
                "{:?}",
                m.workers
            );
        }
        let s = status(n.front()).expect("status");
        assert_eq!(s.front_address, n.advertised_front());
        assert!(s
            .workers
            .iter()
            .all(|w| w.address.starts_with(&format!("{}:", n.cluster_ip))));
    }
    // A redirect names advertised addresses too: ask a worker for a key it does not hold.
    let w0 = h.node(1).workers()[0];
    let redirect = (0..100).find_map(|i| {
        let resp = native_call(
            w0,
            Op::Get(pb::Get {
                key: format!("probe:{i}").into(),
            }),
        )
        .ok()?;
        match resp.result {
            Some(R::Error(e)) if !e.redirect.is_empty() => Some(e.redirect),
            _ => None,
        }
    });
    let redirect = redirect.expect("some key of 100 is held by n1's other worker");
    let cluster_prefix = h.node(1).cluster_ip.rsplit_once('.').unwrap().0.to_string();
    assert!(
        redirect
            .iter()
            .all(|a| a.starts_with(&format!("{cluster_prefix}."))),
        "redirect to {redirect:?}"
    );
    log("published addresses (topology, status, redirects) are the advertised ones");

    // Writers on every node, through the client network.
    let phase = Arc::new(AtomicU8::new(PHASE_BEFORE));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=NODES)
        .map(|i| {
            let (addr, phase, stop) = (h.node(i).resp(), phase.clone(), stop.clone());
            std::thread::spawn(move || writer(i, addr, phase, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));

    h.disconnect(ISOLATED);
    phase.store(PHASE_PARTITION, Ordering::Relaxed);
    let cut = Instant::now();
    log(&format!(
        "n{ISOLATED} disconnected from the cluster network"
    ));

    // The partition is real: each side declares the other dead.
    let isolated = format!("n{ISOLATED}");
    let seen = wait_until(partition.saturating_sub(Duration::from_secs(2)), || {
        h.nodes.iter().enumerate().all(|(i, n)| {
            let Ok(m) = member_statuses(n.front()) else {
                return false;
            };
            if i + 1 == ISOLATED {
                m.iter()
                    .all(|(id, s)| *id == isolated || *s == pb::NodeStatus::Dead)
            } else {
                m.get(&isolated) == Some(&pb::NodeStatus::Dead)
            }
        })
    });
    assert!(
        seen,
        "the partition did not take: {:?}",
        h.nodes
            .iter()
            .map(|n| member_statuses(n.front()))
            .collect::<Vec<_>>()
    );
    log(&format!(
        "both sides declared the other dead after {:.1} s",
        cut.elapsed().as_secs_f64()
    ));
    if let Some(left) = partition.checked_sub(cut.elapsed()) {
        std::thread::sleep(left);
    }

    h.reconnect(ISOLATED);
    phase.store(PHASE_HEALED, Ordering::Relaxed);
    let healed = Instant::now();
    log(&format!("n{ISOLATED} reconnected with the same address"));
    // Writes go on while the node rejoins.
    let mut rejoined_after: Option<Duration> = None;
    while healed.elapsed() < Duration::from_secs(5) {
        if rejoined_after.is_none() && h.nodes.iter().all(|n| all_alive(n.front())) {
            rejoined_after = Some(healed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let mut ledger = Ledger::default();
    let mut per_node = Vec::new();
    for w in writers {
        let l = w.join().expect("writer thread");
        per_node.push(l.per_phase);
        ledger.merge(l);
    }
    log("writers stopped");
    for (i, p) in per_node.iter().enumerate() {
        eprintln!(
            "    n{}: acknowledged/uncertain before {}/{}, partition {}/{}, after {}/{}",
            i + 1,
            p[0][0],
            p[0][1],
            p[1][0],
            p[1][1],
            p[2][0],
            p[2][1]
        );
    }
    for e in &ledger.errors {
        eprintln!("    error: {e}");
    }
    for e in &ledger.slow {
        eprintln!("    slow: {e}");
    }
    // Both sides took writes while cut off from each other.
    for (i, p) in per_node.iter().enumerate() {
        assert!(
            p[PHASE_PARTITION as usize][0] >= 100,
            "n{} acknowledged only {} writes during the partition",
            i + 1,
            p[PHASE_PARTITION as usize][0]
        );
    }

    let rejoined = rejoined_after.is_some()
        || wait_until(CONVERGE_WITHIN, || {
            h.nodes.iter().all(|n| all_alive(n.front()))
        });
    let rejoined_after = rejoined_after.unwrap_or_else(|| healed.elapsed());
    assert!(
        rejoined,
        "n{ISOLATED} did not rejoin within {CONVERGE_WITHIN:?}: {:?}",
        h.nodes
            .iter()
            .map(|n| member_statuses(n.front()))
            .collect::<Vec<_>>()
    );
    log(&format!(
        "membership healed: every node sees {NODES} alive members {:.1} s after the heal",
        rejoined_after.as_secs_f64()
    ));

    let keys = ledger.keys();
    let mut last = String::new();
    let mut first: Option<(f64, String)> = None;
    let mut checks = 0;
    let ok = wait_until(CONVERGE_WITHIN, || {
        checks += 1;
        match converged(&h, &ledger, &keys) {
            Ok(()) => true,
            Err(e) => {
                if first.is_none() {
                    first = Some((healed.elapsed().as_secs_f64(), e.clone()));
                }
                last = e;
                false
            }
        }
    });
    if let Some((at, e)) = &first {
        eprintln!("    not converged yet {at:.1} s after the heal (check 1 of {checks}): {e}");
    }
    assert!(
        ok,
        "replicas did not converge within {CONVERGE_WITHIN:?} of the writers stopping:\n{last}"
    );
    log(&format!(
        "converged: {} keys on every replica, {:.1} s after the heal",
        keys.len(),
        healed.elapsed().as_secs_f64()
    ));
    let uncertain: u64 = ledger.per_phase.iter().map(|p| p[1]).sum();
    let acked: u64 = ledger.per_phase.iter().map(|p| p[0]).sum();
    eprintln!("    {acked} acknowledged writes, none lost; {uncertain} uncertain");
}
