//! Tests of `config`.

use super::*;

#[test]
fn defaults_are_sane() {
    let c = NodeConfig::default();
    assert_eq!(c.listen.port(), 7700);
    assert_eq!(c.resp.port(), 6380);
    assert!(c.worker_count() >= 1);
    assert!(c.limits.memory_budget_bytes() > 0);
    assert!(c.limits.max_frame_size > c.limits.max_value_size);
}

#[test]
fn a_routing_node_checks_what_it_uses_and_only_that() {
    let too_many = NodeConfig {
        vnodes: crate::cluster::state::MAX_VNODES + 1,
        ..NodeConfig::default()
    };
    assert!(too_many
        .validate_routing()
        .unwrap_err()
        .0
        .contains("vnodes"));
    // A storage node's settings do not stop a routing node (no workers, no log there).
    let storage_only = NodeConfig {
        default_local_replication: 0,
        ..NodeConfig::default()
    };
    assert!(storage_only.validate_routing().is_ok());
}

#[test]
fn validate_refuses_what_a_node_cannot_run_with() {
    let c = NodeConfig::default();
    assert!(c.validate().is_ok());
    let refused = |c: NodeConfig| c.validate().map(|_| ()).unwrap_err().0;
    assert!(refused(NodeConfig {
        vnodes: crate::cluster::state::MAX_VNODES + 1,
        ..NodeConfig::default()
    })
    .contains("vnodes"));
    assert!(refused(NodeConfig {
        default_local_replication: 0,
        ..NodeConfig::default()
    })
    .contains("default_local_replication"));
    let mut c = NodeConfig::default();
    c.wal.segment_bytes = 1;
    assert!(refused(c).contains("[wal]"));
    let mut c = NodeConfig::default();
    c.stats.window_ms = c.stats.period_ms * 1000;
    assert!(refused(c).contains("[stats]"));
    assert!(refused(NodeConfig {
        tier: NodeTier::Disk,
        ..NodeConfig::default()
    })
    .contains("data directory"));
    let durable = NodeConfig {
        ack: crate::ack::AckLevel::Durable,
        ..NodeConfig::default()
    };
    assert!(refused(durable.clone()).contains("--data-dir"));
    assert!(NodeConfig {
        data_dir: Some("/nonexistent/latticekv".into()),
        ..durable
    }
    .validate()
    .is_ok());
}

#[test]
fn non_loopback_ports_need_a_user_or_the_explicit_flag() {
    let mut c = NodeConfig::default();
    assert!(c.check_exposure().is_ok());
    c.resp = "0.0.0.0:6380".parse().unwrap();
    let e = c.check_exposure().unwrap_err();
    assert!(e.to_string().contains("--password"), "{e}");
    c.insecure_no_auth = true;
    assert!(c.check_exposure().is_ok());
    c.insecure_no_auth = false;
    c.users = vec![crate::auth::UserConfig::default_with_password("x")];
    assert!(c.check_exposure().is_ok());
    let c = NodeConfig {
        worker_listen: Some("10.0.0.1:7701".parse().unwrap()),
        ..NodeConfig::default()
    };
    assert!(c.check_exposure().is_err());
}

#[test]
fn a_non_loopback_peer_port_needs_a_cluster_secret_or_mutual_tls() {
    let mut c = NodeConfig {
        users: vec![crate::auth::UserConfig::default_with_password("x")],
        listen: "0.0.0.0:7700".parse().unwrap(),
        ..NodeConfig::default()
    };
    let e = c.check_exposure().unwrap_err();
    assert_eq!(e, ExposureError::Peers("0.0.0.0:17700".parse().unwrap()));
    assert!(e.to_string().contains("--cluster-secret"), "{e}");
    // The peer port alone decides: bound to loopback, nothing to authenticate.
    c.peer_listen = Some("127.0.0.1:17700".parse().unwrap());
    assert!(c.check_exposure().is_ok());
    c.peer_listen = Some("10.0.0.1:17700".parse().unwrap());
    assert!(c.check_exposure().is_err());
    c.cluster_secret = Some("s".into());
    assert!(c.check_exposure().is_ok());
    c.cluster_secret = None;
    // TLS without a CA encrypts but authenticates no peer.
    c.tls.cert = Some("node.pem".into());
    c.tls.key = Some("node-key.pem".into());
    assert!(c.check_exposure().is_err());
    c.tls.ca = Some("ca.pem".into());
    assert!(c.check_exposure().is_ok());
    c.tls = crate::tls::TlsConfig::default();
    c.insecure_no_auth = true;
    assert!(c.check_exposure().is_ok());
}

#[test]
fn published_addresses_use_the_advertised_host_and_the_bound_port() {
    let bound: SocketAddr = "0.0.0.0:7701".parse().unwrap();
    let mut c = NodeConfig::default();
    assert_eq!(c.published(bound).unwrap(), "0.0.0.0:7701");
    c.advertise = Some("10.1.2.3".into());
    assert_eq!(c.published(bound).unwrap(), "10.1.2.3:7701");
    c.advertise = Some("node-1.cluster.local".into());
    assert_eq!(c.published(bound).unwrap(), "node-1.cluster.local:7701");
    c.advertise = Some("fd00::5".into());
    assert_eq!(c.published(bound).unwrap(), "[fd00::5]:7701");
    c.advertise = Some("[fd00::5]".into());
    assert_eq!(c.published(bound).unwrap(), "[fd00::5]:7701");
    for bad in [
        "",
        "10.1.2.3:7700",
        "0.0.0.0",
        "::",
        "a b",
        "-x.y",
        "a..b",
        "é",
    ] {
        c.advertise = Some(bad.into());
        assert!(c.published(bound).is_err(), "{bad:?} accepted");
    }
}
