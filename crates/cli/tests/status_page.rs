//! The status page (`GET /` on the HTTP port) in a real browser: two `latticekv server`
//! processes form a cluster, a client writes to it in the background, and headless
//! Chromium (Debian's `chromium`) loads the page, runs its script for 20 s of virtual time
//! (one poll of `/status.json` a second) and dumps the DOM, which must show both members,
//! a non-zero throughput and plots with points. A screenshot is kept at
//! `target/test-output/status-page.png`.
//!
//! Chromium is required: without it the test fails and says how to install it (`make deps`
//! does). A second test checks that a node with a password leaves key names out.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::cluster::{cluster, flags, with};
use common::{eventually, NodeProc, Resp};

const CHROMIUM: &str = "chromium";
/// Virtual time the page runs for before the DOM is dumped: one poll a second.
const BUDGET_MS: &str = "20000";
/// Longest a Chromium run may take (real time).
const CHROMIUM_TIMEOUT_S: &str = "120";

/// One HTTP/1.1 GET; the status code, the head and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    (status, head.to_string(), body.to_string())
}

/// Runs Chromium headless on `url` with `args`, in a profile of its own.
fn chromium(url: &str, args: &[&str]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let budget = format!("--virtual-time-budget={BUDGET_MS}");
    let dir = format!("--user-data-dir={}", profile.path().display());
    let out = Command::new("timeout")
        .args([CHROMIUM_TIMEOUT_S, CHROMIUM])
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            &dir,
            &budget,
        ])
        .args(args)
        .arg(url)
        .output()
        .expect("run timeout(1)");
    assert!(
        out.status.success(),
        "chromium {args:?} {url} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Fails, saying how to get it, if Chromium is not installed.
fn require_chromium() {
    match Command::new(CHROMIUM).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`{CHROMIUM} --version` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "this test needs headless Chromium (`{CHROMIUM}`: {e}); install Debian's package: \
             `apt-get install chromium` (`make deps` does)"
        ),
    }
}

/// The value of attribute `attr` of the element with id `id` in `dom`.
fn attribute<'a>(dom: &'a str, id: &str, attr: &str) -> &'a str {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no element #{id} in the DOM"));
    let start = dom[..at].rfind('<').unwrap();
    let end = start + dom[start..].find('>').unwrap();
    let tag = &dom[start..end];
    let key = format!(" {attr}=\"");
    let from = tag
        .find(&key)
        .unwrap_or_else(|| panic!("#{id} has no {attr}: {tag}"))
        + key.len();
    &tag[from..from + tag[from..].find('"').unwrap()]
}

fn output_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is target/tmp.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-output");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn status_page_shows_the_cluster_live_in_headless_chromium() {
    require_chromium();
    let f = with(&flags("2", "3000"), &["--http", "127.0.0.1:0"]);
    let nodes = cluster(&["s1", "s2"], &f, &[]);
    let http = nodes[0].http.expect("the node prints its HTTP address");

    // Load: one key written on every other request, the rest spread over 1,000.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, resp) = (stop.clone(), nodes[0].resp);
        thread::spawn(move || {
            let mut r = Resp::connect(resp);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = if n.is_multiple_of(2) {
                    "hot:key".to_string()
                } else {
                    format!("k{}", n % 1000)
                };
                r.roundtrip(&[b"SET", key.as_bytes(), b"v"], b"+OK\r\n");
                n += 1;
            }
            n
        })
    };

    // The data first: both members, and a statistics window that saw the load.
    let mut last = String::new();
    let ready = eventually(Duration::from_secs(20), || {
        let (status, _, body) = get(http, "/status.json");
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("status.json is JSON");
        last = body;
        let rate: f64 = v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["ops_per_sec"].as_f64().unwrap())
            .sum();
        v["members"].as_array().unwrap().len() == 2
            && rate > 0.0
            && v["hot_keys"][0]["key"] == "hot:key"
    });
    assert!(ready, "status.json never showed the load: {last}");

    // The page: one file, which may load nothing from elsewhere.
    let (status, head, page) = get(http, "/");
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{head}"
    );
    assert!(head.contains("default-src 'none'"), "{head}");
    assert!(page.contains("<svg id=\"plot-ops\""));

    let url = format!("http://{http}/");
    let out = chromium(&url, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let keep = output_dir();
    std::fs::write(keep.join("status-page.html"), &dom).unwrap();
    let context = || format!("(DOM in {})", keep.join("status-page.html").display());

    assert!(dom.contains("<td>s1 (this node)</td>"), "{}", context());
    assert!(dom.contains("<td>s2</td>"), "{}", context());
    assert_eq!(
        dom.matches("class=\"dot alive\"").count(),
        2,
        "both members alive {}",
        context()
    );
    assert!(
        dom.contains(">live<"),
        "the last poll succeeded {}",
        context()
    );
    let ops: f64 = attribute(&dom, "ops", "data-value").parse().unwrap();
    assert!(ops > 0.0, "throughput {ops} {}", context());
    for line in ["ops-line", "p50-line", "p99-line"] {
        let points: usize = attribute(&dom, line, "data-points").parse().unwrap();
        assert!(points >= 10, "{line} has {points} points {}", context());
        let d = attribute(&dom, line, "d");
        assert_eq!(d.matches(['M', 'L']).count(), points, "{line}: {d}");
    }
    let p99_text = dom
        .split("id=\"p99\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap();
    assert!(
        ["µs", "ms", " s"].iter().any(|u| p99_text.ends_with(u)),
        "p99 {p99_text:?}"
    );
    let busy_workers = dom
        .match_indices("data-ops=\"")
        .filter(|(i, m)| {
            let v = &dom[i + m.len()..];
            v[..v.find('"').unwrap()].parse::<f64>().unwrap() > 0.0
        })
        .count();
    assert!(busy_workers >= 1, "no worker bar shows load {}", context());
    assert!(
        dom.contains(">hot:key<"),
        "the hot key is listed {}",
        context()
    );

    let shot = keep.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    chromium(
        &url,
        &[&arg, "--window-size=1280,1000", "--hide-scrollbars"],
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        png.len() > 20_000,
        "a {} byte screenshot is blank",
        png.len()
    );

    stop.store(true, Ordering::Relaxed);
    let writes = load.join().unwrap();
    assert!(writes > 0);
}

/// The HTTP port takes no credentials, so a node whose clients must authenticate lists its
/// hot keys' counts without their names.
#[test]
fn a_node_with_a_password_withholds_hot_key_names() {
    let node = NodeProc::start(&["--password", "pw", "--disk-nodes", "0"]);
    let http = node.http.expect("local prints its HTTP address");
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"AUTH", b"pw"], b"+OK\r\n");
    for _ in 0..200 {
        r.roundtrip(&[b"SET", b"secret:key", b"v"], b"+OK\r\n");
    }
    let mut last = String::new();
    let listed = eventually(Duration::from_secs(20), || {
        last = get(http, "/status.json").2;
        let v: serde_json::Value = serde_json::from_str(&last).expect("status.json is JSON");
        v["hot_keys"].as_array().is_some_and(|h| !h.is_empty())
    });
    assert!(listed, "no hot key listed: {last}");
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(v["hot_key_names"], false, "{last}");
    assert_eq!(v["hot_keys"][0]["key"], serde_json::Value::Null, "{last}");
    assert!(
        v["hot_keys"][0]["accesses"].as_u64().unwrap() >= 200,
        "{last}"
    );
    assert!(!last.contains("secret:key"), "{last}");
}
