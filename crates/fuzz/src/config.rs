//! The config target: a TOML configuration file (`--config`).
//!
//! Input: the file's bytes (a file that is not UTF-8 is refused as the CLI refuses it).
//!
//! Checks:
//! - parsing and validation never panic; a refused file is an error, never a default: the
//!   same text with an unknown key appended is always refused;
//! - for an accepted file, everything a node derives from it before binding its ports
//!   (worker count, replication vector, peer address, published addresses, core settings,
//!   connection timeouts and their deadlines, users and their ACL rules) works without
//!   panicking, and so do its workers' cores and its agent, started on a manual clock with
//!   those settings and run for a while.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use node::front::pipeline::ReadClock;
use node::NodeConfig;

/// The config target (see the module docs).
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = toml::from_str::<NodeConfig>(text) else {
        return;
    };
    let unknown = format!("{text}\nfuzz_unknown_key_ = 1\n");
    assert!(
        toml::from_str::<NodeConfig>(&unknown).is_err(),
        "a file with an unknown key was accepted"
    );
    let _ = config.check_exposure();
    let Ok(users) = config.validate() else {
        return;
    };
    derived(&config);
    for user in users.list() {
        let _ = user.acl_rule();
        for key in [&b""[..], b"app:1", b"\xff"] {
            let _ = user.may_access(key);
        }
        let _ = users.authenticate(user.name(), b"not the password");
    }
}

/// What a node derives from an accepted configuration before it binds its ports.
fn derived(config: &NodeConfig) {
    let _ = config.worker_count();
    let _ = config.default_vector();
    let _ = config.gossip_period();
    let _ = config.cluster.anti_entropy_period();
    let _ = node::fuzzing::core_config(config);
    node::fuzzing::run_config(config);
    let limits = &config.limits;
    let _ = limits.max_native_request();
    let _ = limits.memory_budget_bytes();
    for bound in [config.listen, config.resp, config.peer_addr()] {
        let _ = config.published(bound);
        let _ = config.published(SocketAddr::new(bound.ip(), 7700));
    }
    // A connection's read deadlines under these timeouts.
    let now = Instant::now();
    let mut clock = ReadClock::new(limits.idle_timeout(), limits.partial_request_timeout(), now);
    let _ = clock.deadline(false);
    clock.read(now + Duration::from_secs(1), false, true);
    let _ = clock.deadline(false);
    let _ = clock.deadline(true);
}
