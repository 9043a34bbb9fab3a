//! Client commands: `get`, `put`, `del`, `replicate`, `watch`, `leave`, `forget` (`status`
//! is in `status`).

use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use client::{Client, Condition};
use lattice::{
    Bool, CausalWriter, LatticeType, Max, Min, OrderedSet, Priority, Set, SingleKeyCausal, Value,
};

/// Where client commands find the node.
#[derive(Args, Debug)]
pub struct Target {
    /// Address of the node's native front port.
    #[arg(long, env = "LATTICEKV_ADDR", default_value = "127.0.0.1:7700")]
    pub(crate) addr: String,
    /// User to authenticate as, on a node with users (default: `default`, the user of the
    /// node's --password).
    #[arg(long, env = "LATTICEKV_USER")]
    user: Option<String>,
    /// Password, on a node with users or a --password (prefer the environment variable:
    /// command lines are visible to other users of the machine).
    #[arg(long, env = "LATTICEKV_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Connect with TLS, trusting the system's CAs (or --tls-ca).
    #[arg(
        long,
        env = "LATTICEKV_TLS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    tls: bool,
    /// Connect with TLS, trusting the CA certificates in this PEM file (implies --tls).
    #[arg(long, env = "LATTICEKV_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,
    /// The name the node's certificate must hold, if not the host of the address (implies
    /// --tls).
    #[arg(long, env = "LATTICEKV_TLS_SERVER_NAME")]
    tls_server_name: Option<String>,
}

impl Target {
    /// A node at `addr` without credentials or TLS.
    pub(crate) fn local(addr: String) -> Target {
        Target {
            addr,
            user: None,
            password: None,
            tls: false,
            tls_ca: None,
            tls_server_name: None,
        }
    }

    /// The credentials to send, if a password was given.
    pub(crate) fn credentials(&self) -> Option<client::Credentials> {
        let password = self.password.clone()?;
        Some(client::Credentials::new(
            self.user.clone().unwrap_or_default(),
            password,
        ))
    }

    /// TLS settings, if any TLS flag was given.
    fn tls(&self) -> Result<Option<client::ClientTls>> {
        if !self.tls && self.tls_ca.is_none() && self.tls_server_name.is_none() {
            return Ok(None);
        }
        let mut tls = client::ClientTls::new(self.tls_ca.as_deref()).context("--tls-ca")?;
        if let Some(name) = &self.tls_server_name {
            tls = tls.with_server_name(name);
        }
        Ok(Some(tls))
    }

    pub(crate) fn options(&self) -> Result<client::ClientOptions> {
        Ok(client::ClientOptions {
            credentials: self.credentials(),
            tls: self.tls()?,
            ..Default::default()
        })
    }

    /// One connection to the node's front port, authenticated.
    async fn open(&self) -> Result<client::connection::Connection> {
        let tls = self.tls()?;
        client::connection::Connection::open_with(
            &self.addr,
            tls.as_ref(),
            self.credentials().as_ref(),
        )
        .await
        .with_context(|| format!("connecting to {}", self.addr))
    }
}

/// `latticekv get KEY`
#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
}

/// `latticekv watch KEY… [--period-ms N] [--count N]`
#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    target: Target,
    /// The keys.
    #[arg(required = true)]
    keys: Vec<String>,
    /// At most one notification per key per this many milliseconds.
    #[arg(long, default_value_t = 100)]
    period_ms: u64,
    /// Exit after this many notifications (0: never).
    #[arg(long, default_value_t = 0)]
    count: u64,
}

/// `latticekv put KEY VALUE… [--type T]`
#[derive(Args, Debug)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// The value; several for set types (members).
    #[arg(required = true, allow_negative_numbers = true)]
    values: Vec<String>,
    /// Lattice type: lww, set, orset, ordered-set, counter, max, min, bool, priority, causal.
    #[arg(long = "type", short = 't', default_value = "lww")]
    lattice: String,
    /// Priority, for `--type priority` (the lowest wins).
    #[arg(long)]
    priority: Option<f64>,
    /// For lww: only write if the key does not exist.
    #[arg(long, conflicts_with = "xx")]
    nx: bool,
    /// For lww: only write if the key exists.
    #[arg(long)]
    xx: bool,
}

/// `latticekv del KEY…`
#[derive(Args, Debug)]
pub struct DelArgs {
    #[command(flatten)]
    target: Target,
    /// Keys to delete.
    #[arg(required = true)]
    keys: Vec<String>,
}

/// `latticekv replicate KEY --local N`
#[derive(Args, Debug)]
pub struct ReplicateArgs {
    #[command(flatten)]
    target: Target,
    /// The key.
    key: String,
    /// Workers of each memory-tier node holding the key (default: unchanged).
    #[arg(long)]
    local: Option<u32>,
    /// Memory-tier nodes holding the key; 0 keeps it out of memory (a cold key, served by
    /// the disk tier). Default: unchanged.
    #[arg(long)]
    global: Option<u32>,
    /// Disk-tier nodes holding the key (0: none). Default: unchanged.
    #[arg(long)]
    disk: Option<u32>,
    /// Return the key to the cluster's default placement (drop its own vector).
    #[arg(long, conflicts_with_all = ["local", "global", "disk"])]
    reset: bool,
}

/// Runs a client command on a small runtime; returns the process exit code.
pub fn block_on(f: impl std::future::Future<Output = Result<i32>>) -> Result<i32> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

pub(crate) async fn connect(t: &Target) -> Result<Client> {
    Client::connect_with(&t.addr, t.options()?)
        .await
        .with_context(|| format!("connecting to {}", t.addr))
}

fn print_value(out: &mut impl Write, value: &Value) -> std::io::Result<()> {
    match value {
        Value::Lww(l) => {
            out.write_all(&l.value)?;
            writeln!(out)
        }
        Value::Counter(c) => writeln!(out, "{}", c.value()),
        Value::Max(Max(n)) | Value::Min(Min(n)) => writeln!(out, "{n}"),
        Value::Bool(Bool(b)) => writeln!(out, "{b}"),
        Value::Priority(p) => {
            out.write_all(&p.value)?;
            writeln!(out, "\t(priority {})", p.priority)
        }
        Value::Set(s) => s.iter().try_for_each(|m| member(out, m)),
        Value::OrderedSet(s) => s.iter().try_for_each(|m| member(out, m)),
        Value::OrSet(s) => s.iter().try_for_each(|m| member(out, m)),
        Value::SingleKeyCausal(c) => c.values().try_for_each(|v| member(out, v)),
        Value::MultiKeyCausal(c) => c.values().try_for_each(|v| member(out, v)),
        // ---- lists (helper B) ----
        Value::List(l) => l.values().try_for_each(|v| member(out, v)),
        Value::Map(m) => m.iter().try_for_each(|(k, v)| {
            out.write_all(k)?;
            write!(out, " = ")?;
            print_value(out, v)
        }),
        // Redis hashes and sorted sets.
        Value::Hash(h) => h.iter().try_for_each(|(f, v)| {
            out.write_all(f)?;
            write!(out, " = ")?;
            member(out, v)
        }),
        Value::SortedSet(z) => z.iter().try_for_each(|(m, s)| {
            out.write_all(m)?;
            writeln!(out, "\t{s}")
        }),
    }
}

fn member(out: &mut impl Write, m: &[u8]) -> std::io::Result<()> {
    out.write_all(m)?;
    writeln!(out)
}

/// `get`: prints the value; exit code 1 if the key does not exist.
pub async fn get(args: GetArgs) -> Result<i32> {
    let c = connect(&args.target).await?;
    match c.get(&args.key).await? {
        Some(v) => {
            let mut out = std::io::stdout().lock();
            print_value(&mut out, &v)?;
            Ok(0)
        }
        None => {
            eprintln!("(not found)");
            Ok(1)
        }
    }
}

/// `watch`: subscribes to the keys and prints `KEY = VALUE` for the current value of each,
/// then for every new version (`KEY = (absent)` when it does not exist), at most once per
/// key per period.
pub async fn watch(args: WatchArgs) -> Result<i32> {
    let c = connect(&args.target).await?;
    let period = std::time::Duration::from_millis(args.period_ms);
    let mut sub = c
        .subscribe(&args.keys, period)
        .await
        .context("subscribing")?;
    let mut seen = 0u64;
    while let Some(n) = sub.next().await {
        let mut out = std::io::stdout().lock();
        out.write_all(&n.key)?;
        write!(out, " = ")?;
        match &n.value {
            Some(v) => print_value(&mut out, v)?,
            None => writeln!(out, "(absent)")?,
        }
        out.flush()?;
        seen += 1;
        if args.count > 0 && seen >= args.count {
            break;
        }
    }
    Ok(0)
}

fn parse_int(s: &str) -> Result<i64> {
    s.parse()
        .map_err(|_| anyhow!("{s:?} is not a 64-bit integer"))
}

/// `put`: writes according to `--type`; prints what the write returns, if anything.
pub async fn put(args: PutArgs) -> Result<i32> {
    let ty = LatticeType::from_name(&args.lattice).ok_or_else(|| {
        let names: Vec<_> = LatticeType::ALL.iter().map(|t| t.name()).collect();
        anyhow!(
            "unknown type {:?}; one of {}",
            args.lattice,
            names.join(", ")
        )
    })?;
    let single = || -> Result<&String> {
        match args.values.as_slice() {
            [v] => Ok(v),
            _ => bail!("--type {} takes exactly one value", ty.name()),
        }
    };
    let c = connect(&args.target).await?;
    let key = &args.key;
    match ty {
        LatticeType::Lww => {
            let condition = if args.nx {
                Condition::IfAbsent
            } else if args.xx {
                Condition::IfPresent
            } else {
                Condition::Always
            };
            if !c.assign_if(key, single()?, condition).await? {
                eprintln!("not written (condition not met)");
                return Ok(1);
            }
        }
        LatticeType::OrSet => {
            let added = c.set_add(key, &args.values).await?;
            println!("{added}");
        }
        LatticeType::Set => {
            let set: Set<_> = args.values.iter().map(|v| v.as_bytes().into()).collect();
            c.put(key, Value::Set(set)).await?;
        }
        LatticeType::OrderedSet => {
            let set: OrderedSet<_> = args.values.iter().map(|v| v.as_bytes().into()).collect();
            c.put(key, Value::OrderedSet(set)).await?;
        }
        LatticeType::Counter => {
            let n = c.counter_add(key, parse_int(single()?)?).await?;
            println!("{n}");
        }
        LatticeType::Max => c.put(key, Value::Max(Max(parse_int(single()?)?))).await?,
        LatticeType::Min => c.put(key, Value::Min(Min(parse_int(single()?)?))).await?,
        LatticeType::Bool => {
            let b: bool = single()?
                .parse()
                .map_err(|_| anyhow!("a bool is `true` or `false`"))?;
            c.put(key, Value::Bool(Bool(b))).await?
        }
        LatticeType::Priority => {
            let priority = args
                .priority
                .ok_or_else(|| anyhow!("--type priority needs --priority"))?;
            let value = single()?.as_bytes().into();
            c.put(key, Value::Priority(Priority { priority, value }))
                .await?
        }
        LatticeType::SingleKeyCausal => {
            // Read-modify-write: the new version dominates what this client read.
            let read = match c.get(key).await? {
                Some(Value::SingleKeyCausal(v)) => v.clock(),
                Some(other) => bail!("key holds a {} value", other.lattice_type()),
                None => Default::default(),
            };
            let mut writer = CausalWriter::new(fastrand::u64(..));
            let clock = writer.next_clock(&read);
            let value = SingleKeyCausal::new(clock, single()?.as_bytes().into());
            c.put(key, Value::SingleKeyCausal(value)).await?
        }
        LatticeType::Map
        | LatticeType::MultiKeyCausal
        | LatticeType::List
        // Redis hashes and sorted sets: written with RESP commands (HSET, ZADD).
        | LatticeType::Hash
        | LatticeType::SortedSet => {
            bail!(
                "--type {} is not writable from the CLI; use a client library",
                ty.name()
            )
        }
    }
    Ok(0)
}

/// `del`: prints the number of keys that existed.
pub async fn del(args: DelArgs) -> Result<i32> {
    let c = connect(&args.target).await?;
    let mut n = 0;
    for key in &args.keys {
        n += c.delete(key).await? as u64;
    }
    println!("{n}");
    Ok(0)
}

/// `replicate`: sets a key's replication vector, or returns it to the default.
pub async fn replicate(args: ReplicateArgs) -> Result<i32> {
    let c = connect(&args.target).await?;
    if args.reset {
        c.reset_vector(&args.key).await?;
        println!("OK");
        return Ok(0);
    }
    let mut vector = c.layout().vector(args.key.as_bytes());
    if let Some(l) = args.local {
        vector.memory.local = l;
    }
    if let Some(g) = args.global {
        vector.memory.global = g;
    }
    if let Some(d) = args.disk {
        vector.disk.global = d;
    }
    c.set_vector(&args.key, vector).await?;
    println!("OK");
    Ok(0)
}

/// `leave --addr NODE [--force]`
#[derive(Args, Debug)]
pub struct LeaveArgs {
    #[command(flatten)]
    target: Target,
    /// Stop without waiting until every key is acknowledged by its new replicas: keys not
    /// yet handed off are lost.
    #[arg(long)]
    force: bool,
}

/// `leave`: the node hands its keys off and stops; the answer comes once every key is
/// acknowledged by its new replicas, however long that takes (Ctrl-C stops waiting, not
/// the leave).
pub async fn leave(args: LeaveArgs) -> Result<i32> {
    let conn = args.target.open().await?;
    let req = wire::pb::Request {
        id: 1,
        op: Some(wire::pb::request::Op::Admin(wire::pb::Admin {
            op: Some(wire::pb::admin::Op::Leave(wire::pb::Leave {
                force: args.force,
            })),
        })),
        ..Default::default()
    };
    // A leave answers once every key is handed off: minutes for a large node. A spinner
    // with the time waited shows it is working (on a terminal only).
    let waiting = indicatif::ProgressBar::new_spinner().with_message(if args.force {
        "leaving (forced): offering the keys to their new replicas"
    } else {
        "leaving: handing every key off to its new replicas"
    });
    waiting.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4}  {msg}")
            .expect("a valid template"),
    );
    waiting.enable_steady_tick(std::time::Duration::from_millis(200));
    let resp = conn.call(req).await;
    waiting.finish_and_clear();
    match resp?.result {
        Some(wire::pb::response::Result::Ack(_)) => {
            println!("left");
            Ok(0)
        }
        Some(wire::pb::response::Result::Error(e)) => bail!("{}", e.message),
        other => bail!("unexpected answer: {other:?}"),
    }
}

/// `forget NODE --addr A`
#[derive(Args, Debug)]
pub struct ForgetArgs {
    #[command(flatten)]
    target: Target,
    /// The id of a member declared dead that will not come back with its data.
    node: String,
}

/// `forget`: removes a member declared dead for good from the cluster (its data is
/// considered lost; tombstones held back for it can be reclaimed).
pub async fn forget(args: ForgetArgs) -> Result<i32> {
    let conn = args.target.open().await?;
    let req = wire::pb::Request {
        id: 1,
        op: Some(wire::pb::request::Op::Admin(wire::pb::Admin {
            op: Some(wire::pb::admin::Op::Forget(wire::pb::Forget {
                node_id: args.node.clone(),
            })),
        })),
        ..Default::default()
    };
    match conn.call(req).await?.result {
        Some(wire::pb::response::Result::Ack(_)) => {
            println!("forgot {}", args.node);
            Ok(0)
        }
        Some(wire::pb::response::Result::Error(e)) => bail!("{}", e.message),
        other => bail!("unexpected answer: {other:?}"),
    }
}

pub(crate) fn status_name(status: i32) -> &'static str {
    match wire::pb::NodeStatus::try_from(status) {
        Ok(wire::pb::NodeStatus::Alive) => "alive",
        Ok(wire::pb::NodeStatus::Suspect) => "suspect",
        Ok(wire::pb::NodeStatus::Dead) => "dead",
        Ok(wire::pb::NodeStatus::Left) => "left",
        Err(_) => "?",
    }
}
