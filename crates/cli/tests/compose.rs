//! The Compose cluster of `deploy/compose/compose.yaml`, started for real from the image:
//! three memory nodes, a disk node and the monitor come up healthy with the secrets from the
//! environment; a write through one node is read on another, every member is alive, and the
//! state lands in the node's volume, written by the image's non-root user.
//!
//! Ignored by a plain `cargo test`: it needs Docker, a Compose tool (`docker compose` or
//! `docker-compose`) and the image. `make docker-test` (`tests/docker/run.sh`) builds the
//! image and runs it with `LATTICEKV_DOCKER_IMAGE` set; the test removes its containers and
//! volumes (`down -v`) when it ends, a panic included.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const IMAGE_ENV: &str = "LATTICEKV_DOCKER_IMAGE";
const RUN_ENV: &str = "LATTICEKV_DOCKER_RUN";
/// Bound on the cluster becoming healthy (the nodes' health checks run every 5 s).
const HEALTHY_WITHIN: Duration = Duration::from_secs(90);
const NODES: [&str; 4] = ["n1", "n2", "n3", "disk1"];

/// A Compose project of its own; `down -v` on drop.
struct Project {
    tool: Vec<String>,
    name: String,
    file: PathBuf,
    image: String,
    secret: String,
    password: String,
    /// Host ports of n1's RESP and native ports.
    ports: (u16, u16),
}

impl Project {
    fn run(&self, args: &[&str]) -> Output {
        let (program, pre) = self.tool.split_first().expect("a compose command");
        Command::new(program)
            .args(pre)
            .args(["-p", &self.name, "-f"])
            .arg(&self.file)
            .args(args)
            .env("LATTICEKV_IMAGE", &self.image)
            .env("LATTICEKV_CLUSTER_SECRET", &self.secret)
            .env("LATTICEKV_PASSWORD", &self.password)
            // n1 publishes its RESP and native ports on the host's loopback: free ones, not
            // 6380/7700, which other nodes on this host may hold.
            .env("LATTICEKV_RESP_PORT", self.ports.0.to_string())
            .env("LATTICEKV_NATIVE_PORT", self.ports.1.to_string())
            .output()
            .expect("run compose")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "compose {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `latticekv ARGS` inside `service`'s container (the CLI is in the image).
    fn cli(&self, service: &str, args: &[&str]) -> String {
        let mut all = vec!["exec", "-T", service, "/latticekv"];
        all.extend_from_slice(args);
        self.ok(&all)
    }

    /// The container of `service`.
    fn container(&self, service: &str) -> String {
        self.ok(&["ps", "-q", service]).trim().to_string()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.run(&["logs", "--no-color", "--tail", "40"]);
            eprintln!("{}", String::from_utf8_lossy(&logs.stdout));
        }
        let out = self.run(&["down", "-v", "--remove-orphans"]);
        if !out.status.success() {
            eprintln!("cleanup: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn compose_tool() -> Vec<String> {
    let v2 = Command::new("docker").args(["compose", "version"]).output();
    if v2.is_ok_and(|o| o.status.success()) {
        return vec!["docker".into(), "compose".into()];
    }
    vec!["docker-compose".into()]
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
#[ignore = "needs Docker, Compose and the image; run with `make docker-test`"]
fn the_compose_cluster_comes_up_and_serves() {
    let image = std::env::var(IMAGE_ENV).expect("LATTICEKV_DOCKER_IMAGE names the image");
    let run = std::env::var(RUN_ENV).unwrap_or_else(|_| format!("lkvc{}", std::process::id()));
    let project = Project {
        tool: compose_tool(),
        name: format!("{run}-compose").to_lowercase(),
        file: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/compose/compose.yaml"),
        image,
        secret: format!("peers-{}", fastrand::u64(..)),
        password: format!("clients-{}", fastrand::u64(..)),
        ports: (free_port(), free_port()),
    };
    let started = Instant::now();
    project.ok(&["up", "-d"]);

    // Healthy: each node's own health check (`latticekv status`) passes.
    let deadline = Instant::now() + HEALTHY_WITHIN;
    loop {
        let health: Vec<String> = NODES
            .iter()
            .map(|s| {
                let id = project.container(s);
                docker(&["inspect", "--format", "{{.State.Health.Status}}", &id])
            })
            .collect();
        if health.iter().all(|h| h == "healthy") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not healthy within {HEALTHY_WITHIN:?}: {health:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "compose: healthy after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Every member alive, seen from n1; a write through n1 is read through n3 and disk1.
    let deadline = Instant::now() + HEALTHY_WITHIN;
    loop {
        let status = project.cli("n1", &["status"]);
        let alive = NODES
            .iter()
            .filter(|n| {
                status.lines().any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.first() == Some(n) && cols.get(2) == Some(&"alive")
                })
            })
            .count();
        if alive == NODES.len() {
            break;
        }
        assert!(Instant::now() < deadline, "members not all alive: {status}");
        std::thread::sleep(Duration::from_millis(500));
    }
    project.cli("n1", &["put", "greeting", "hello"]);
    // From the host, through the published RESP port, as a Redis client would.
    let resp = std::net::SocketAddr::from(([127, 0, 0, 1], project.ports.0));
    let mut r = testkit::Resp::connect(resp);
    r.roundtrip(&[b"AUTH", project.password.as_bytes()], b"+OK\r\n");
    r.roundtrip(&[b"GET", b"greeting"], b"$5\r\nhello\r\n");
    for node in ["n3", "disk1"] {
        let addr = format!("{node}:7700");
        assert_eq!(
            project.cli(node, &["get", "greeting", "--addr", &addr]),
            "hello\n"
        );
    }

    // The monitor runs (with the password from the environment) and polls the nodes.
    let monitor = project.container("monitor");
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.Running}}", &monitor]),
        "true"
    );

    // Not root, and the state is in the named volume at /data.
    let n1 = project.container("n1");
    assert_eq!(
        docker(&["inspect", "--format", "{{.Config.User}}", &n1]),
        "65532:65532"
    );
    let mounts = docker(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{.Type}} {{.Name}} {{.Destination}};{{end}}",
        &n1,
    ]);
    assert!(
        mounts.contains(&format!("volume {}_n1-data /data", project.name)),
        "{mounts}"
    );

    // A restarted node comes back as itself, with its data (--no-leave, the volume).
    project.ok(&["restart", "n2"]);
    let deadline = Instant::now() + HEALTHY_WITHIN;
    loop {
        let out = project.run(&[
            "exec",
            "-T",
            "n2",
            "/latticekv",
            "get",
            "greeting",
            "--addr",
            "n2:7700",
        ]);
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
            break;
        }
        assert!(Instant::now() < deadline, "n2 did not come back");
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "compose: passed after {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
