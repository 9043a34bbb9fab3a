//! `latticekv local --nodes N`: N storage processes and one routing process, supervised by
//! this one (a child that exits is started again as itself), and the elasticity monitor
//! polling them with `--monitor`.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::config::{init_logging, node_config, wait, LocalArgs, NodeArgs, DEFAULT_LOCAL_DATA_DIR};

/// A child process, how it was started and the addresses it printed.
struct ChildNode {
    child: Child,
    args: Vec<String>,
    lines: Vec<String>,
}

/// The secrets children get by the environment (not visible in `ps`).
fn secrets(a: &NodeArgs) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some(p) = &a.password {
        env.push(("LATTICEKV_PASSWORD".to_string(), p.clone()));
    }
    if let Some(s) = &a.cluster_secret {
        env.push(("LATTICEKV_CLUSTER_SECRET".to_string(), s.clone()));
    }
    env
}

/// Starts `latticekv ARGS` with `env`.
fn spawn_child(args: &[String], env: &[(String, String)]) -> Result<ChildNode> {
    let exe = std::env::current_exe().context("finding the latticekv binary")?;
    let mut command = Command::new(exe);
    command.envs(env.iter().map(|(k, v)| (k, v)));
    // The nodes stop with this process even if it is killed outright (SIGKILL runs no
    // destructor): the kernel sends them SIGTERM when the thread that started them ends —
    // the main thread, or the supervisor thread, which both live as long as the cluster.
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // prctl, which is async-signal-safe, and reads errno.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting a node process")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut reader = BufReader::new(stdout);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            let _ = child.kill();
            bail!("a node process exited during start-up: {args:?}");
        }
        if line.starts_with("press") {
            break;
        }
        lines.push(line.trim_end().to_string());
    }
    // Keep draining its stdout.
    std::thread::spawn(move || for _ in reader.lines() {});
    Ok(ChildNode {
        child,
        args: args.to_vec(),
        lines,
    })
}

/// The children of a local cluster, shared by the supervisor thread and the main thread.
struct Supervised {
    nodes: Vec<ChildNode>,
    stopping: bool,
}

/// Replaces children that exit while the cluster runs: each is started again with its
/// arguments (same id, addresses and data directory, so it rejoins as itself), at most
/// once per second each. The first node, started without seeds, gets the second's
/// address so it rejoins the others.
fn supervise(shared: Arc<Mutex<Supervised>>, env: Vec<(String, String)>) {
    std::thread::Builder::new()
        .name("lkv-supervisor".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            if s.stopping {
                return;
            }
            let seed = s.nodes.get(1).and_then(|c| field(&c.lines, "native"));
            for i in 0..s.nodes.len() {
                if !matches!(s.nodes[i].child.try_wait(), Ok(Some(_))) {
                    continue;
                }
                let mut args = s.nodes[i].args.clone();
                if !args.iter().any(|a| a == "--seeds") {
                    if let Some(seed) = &seed {
                        args.extend(["--seeds".to_string(), seed.clone()]);
                    }
                }
                let id = args
                    .iter()
                    .position(|a| a == "--node-id")
                    .and_then(|i| args.get(i + 1))
                    .map_or("a node", |s| s.as_str());
                esay!("{id} exited; starting it again");
                match spawn_child(&args, &env) {
                    Ok(mut c) => {
                        c.args = s.nodes[i].args.clone();
                        s.nodes[i] = c;
                    }
                    Err(e) => esay!("restart failed: {e:#}"),
                }
            }
        })
        .expect("spawning the supervisor thread");
}

fn field(lines: &[String], name: &str) -> Option<String> {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(name).map(|r| r.trim().to_string()))
}

/// The address for node `i` (0-based) of a local cluster: 127.0.0.(i+1) when the
/// configured address is 127.0.0.1, keeping the port.
fn node_addr(base: SocketAddr, i: usize) -> SocketAddr {
    match base.ip() {
        IpAddr::V4(ip) if ip == Ipv4Addr::LOCALHOST => SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + i as u8)),
            base.port(),
        ),
        _ => SocketAddr::new(
            base.ip(),
            if base.port() == 0 {
                0
            } else {
                base.port() + 10 * i as u16
            },
        ),
    }
}

/// `latticekv local --nodes N`: N storage processes and one routing process, supervised.
pub(crate) fn run(args: LocalArgs) -> Result<()> {
    init_logging();
    let n = args.nodes;
    if args.faas.faas {
        bail!(
            "--faas runs beside one node only: with --nodes, run `latticekv faas scheduler` \
             and `latticekv faas host` beside the cluster"
        );
    }
    if n + args.disk_nodes > 200 {
        bail!(
            "--nodes {n} --disk-nodes {}: at most 200 local nodes",
            args.disk_nodes
        );
    }
    let config = node_config(&args.node)?;
    let mut common: Vec<String> = Vec::new();
    let a = &args.node;
    let env = secrets(a);
    if let Some(v) = &a.config {
        common.extend(["--config".into(), v.display().to_string()]);
    }
    if a.insecure_no_auth {
        common.push("--insecure-no-auth".into());
    }
    for (flag, value) in [
        ("--workers", a.workers.map(|v| v.to_string())),
        (
            "--gossip-period-ms",
            a.gossip_period_ms.map(|v| v.to_string()),
        ),
        (
            "--default-local-replication",
            a.default_local_replication.map(|v| v.to_string()),
        ),
        (
            "--replication",
            Some(config.cluster.default_global_replication.to_string()),
        ),
        (
            "--disk-replication",
            a.disk_replication.map(|v| v.to_string()),
        ),
        ("--ack", a.ack.clone()),
        (
            "--tls-cert",
            a.tls_cert.as_ref().map(|p| p.display().to_string()),
        ),
        (
            "--tls-key",
            a.tls_key.as_ref().map(|p| p.display().to_string()),
        ),
        (
            "--tls-ca",
            a.tls_ca.as_ref().map(|p| p.display().to_string()),
        ),
        ("--ack-replicas", a.ack_replicas.map(|v| v.to_string())),
        ("--fsync", a.fsync.clone()),
        ("--memory-budget", a.memory_budget.map(|v| v.to_string())),
        ("--advertise", a.advertise.clone()),
        (
            "--failure-timeout-ms",
            a.failure_timeout_ms.map(|v| v.to_string()),
        ),
        (
            "--anti-entropy-ms",
            a.anti_entropy_ms.map(|v| v.to_string()),
        ),
        (
            "--cluster-gossip-ms",
            a.cluster_gossip_ms.map(|v| v.to_string()),
        ),
    ] {
        if let Some(v) = value {
            common.extend([flag.to_string(), v]);
        }
    }
    let mut children: Vec<ChildNode> = Vec::new();
    let mut disk_children: Vec<ChildNode> = Vec::new();
    let mut seed: Option<String> = None;
    let result = (|| -> Result<()> {
        for i in 0..n {
            let mut child_args = vec![
                "server".to_string(),
                "--no-leave".into(),
                "--node-id".into(),
                format!("node{}", i + 1),
                "--listen".into(),
                node_addr(config.listen, i).to_string(),
                "--resp".into(),
                node_addr(config.resp, i).to_string(),
            ];
            if let Some(dir) = &config.data_dir {
                child_args.extend([
                    "--data-dir".into(),
                    dir.join(format!("node{}", i + 1)).display().to_string(),
                ]);
            }
            child_args.extend(common.iter().cloned());
            if let Some(s) = &seed {
                child_args.extend(["--seeds".into(), s.clone()]);
            }
            let child = spawn_child(&child_args, &env)?;
            if seed.is_none() {
                seed = field(&child.lines, "native");
            }
            children.push(child);
        }
        let data = config
            .data_dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from(DEFAULT_LOCAL_DATA_DIR));
        for i in 0..args.disk_nodes {
            let mut child_args = vec![
                "server".to_string(),
                "--no-leave".into(),
                "--tier".into(),
                "disk".into(),
                "--node-id".into(),
                format!("disk{}", i + 1),
                "--listen".into(),
                node_addr(config.listen, n + i).to_string(),
                "--resp".into(),
                node_addr(config.resp, n + i).to_string(),
                "--data-dir".into(),
                data.join(format!("disk{}", i + 1)).display().to_string(),
            ];
            child_args.extend(common.iter().cloned());
            if let Some(s) = &seed {
                child_args.extend(["--seeds".into(), s.clone()]);
            }
            disk_children.push(spawn_child(&child_args, &env)?);
        }
        let routing_listen = SocketAddr::new(
            config.listen.ip(),
            if config.listen.port() == 0 {
                0
            } else {
                config.listen.port().saturating_sub(100)
            },
        );
        let mut routing_args = vec![
            "routing".to_string(),
            "--node-id".into(),
            "routing".into(),
            "--listen".into(),
            routing_listen.to_string(),
        ];
        routing_args.extend(common.iter().cloned());
        if let Some(s) = &seed {
            routing_args.extend(["--seeds".into(), s.clone()]);
        }
        children.push(spawn_child(&routing_args, &env)?);
        Ok(())
    })();
    if let Err(e) = result {
        stop_children(&mut children);
        stop_children(&mut disk_children);
        return Err(e);
    }
    say!(
        "latticekv {} running: local cluster of {n} node(s), replication {}",
        env!("CARGO_PKG_VERSION"),
        config.cluster.default_global_replication
    );
    for (i, c) in children.iter().take(n).enumerate() {
        say!(
            "node{} native {} resp {} workers {}",
            i + 1,
            field(&c.lines, "native").unwrap_or_default(),
            field(&c.lines, "resp").unwrap_or_default(),
            field(&c.lines, "workers").unwrap_or_default()
        );
    }
    for (i, c) in disk_children.iter().enumerate() {
        say!(
            "disk{} native {} (disk tier)",
            i + 1,
            field(&c.lines, "native").unwrap_or_default()
        );
    }
    if let Some(r) = children.last() {
        say!("routing {}", field(&r.lines, "routing").unwrap_or_default());
    }
    if let Some(first) = children.first() {
        say!(
            "native  {}",
            field(&first.lines, "native").unwrap_or_default()
        );
        say!(
            "resp    {}",
            field(&first.lines, "resp").unwrap_or_default()
        );
    }
    let first = children.first().and_then(|c| field(&c.lines, "native"));
    if let (true, Some(addr)) = (args.monitor && a.password.is_none(), first) {
        let policy = crate::monitoring::load_policy(args.monitor_config.as_deref())?;
        std::thread::Builder::new()
            .name("lkv-monitor".into())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(crate::monitoring::embedded(addr, policy));
                }
            })
            .context("starting the monitor")?;
    }
    children.append(&mut disk_children);
    let shared = Arc::new(Mutex::new(Supervised {
        nodes: children,
        stopping: false,
    }));
    supervise(shared.clone(), env);
    // SIGHUP reloads every node's TLS certificate.
    let hangup = || {
        let s = shared.lock().unwrap_or_else(|p| p.into_inner());
        for c in &s.nodes {
            // SAFETY: kill(2) on a child's pid; no memory is involved.
            unsafe { libc::kill(c.child.id() as libc::pid_t, libc::SIGHUP) };
        }
    };
    wait(None, &hangup)?;
    esay!("stopping the local cluster…");
    let mut nodes = {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        s.stopping = true;
        std::mem::take(&mut s.nodes)
    };
    stop_children(&mut nodes);
    esay!("stopped");
    Ok(())
}

fn stop_children(children: &mut [ChildNode]) {
    for c in children.iter() {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(c.child.id() as i32, libc::SIGTERM);
        }
    }
    for c in children.iter_mut() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match c.child.try_wait() {
                Ok(Some(_)) => break,
                _ if std::time::Instant::now() > deadline => {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        }
    }
}
