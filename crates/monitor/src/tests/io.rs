//! The configuration from TOML and its validation; snapshots and actions as JSON.

use super::{key, latency, snapshot, DEFAULT};
use crate::config::{Aggregate, Band, ConfigError, PolicyConfig};
use crate::{Action, Tier, Vector};

#[test]
fn toml_takes_defaults_for_missing_keys_and_refuses_unknown_ones() {
    let cfg: PolicyConfig = toml::from_str(
        r#"
        fault_tolerance = 2
        budget_per_hour = 4.4
        add_occupancy = "mean"
        [disk_storage]
        lower = 0.4
        upper = 0.8
        [prices]
        memory_node = 1.0
        "#,
    )
    .expect("parses");
    assert_eq!(cfg.fault_tolerance, 2);
    assert_eq!(cfg.budget_per_hour, Some(4.4));
    assert_eq!(cfg.add_occupancy, Aggregate::Mean);
    assert_eq!(cfg.disk_storage, Band::new(0.4, 0.8));
    assert_eq!(cfg.prices.memory_node, 1.0);
    assert_eq!(cfg.prices.disk_node, 0.133);
    assert_eq!(cfg.grace_ms, PolicyConfig::default().grace_ms);
    assert!(cfg.budget_mode());
    assert_eq!(cfg.latency_objective(), 1_000);
    cfg.validate().expect("valid");

    assert_eq!(
        toml::from_str::<PolicyConfig>("").unwrap(),
        PolicyConfig::default()
    );
    let err = toml::from_str::<PolicyConfig>("grace_period = 5").unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
    let err = toml::from_str::<PolicyConfig>("[prices]\ngpu = 5.0").unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
}

#[test]
fn validate_refuses_nonsense() {
    PolicyConfig::default()
        .validate()
        .expect("the defaults are valid");
    type Edit = fn(&mut PolicyConfig);
    let table: [(Edit, &str); 14] = [
        (|c| c.memory_storage = Band::new(0.7, 0.6), "memory_storage"),
        (|c| c.disk_storage = Band::new(0.5, 0.5), "disk_storage"),
        (|c| c.compute_band = Band::new(0.05, 1.5), "compute_band"),
        (|c| c.latency_band = Band::new(-0.1, 0.75), "latency_band"),
        (
            |c| c.latency_band = Band::new(0.5, f64::NAN),
            "latency_band",
        ),
        (|c| c.prices.disk_node = -1.0, "prices.disk_node"),
        (
            |c| c.budget_per_hour = Some(f64::INFINITY),
            "budget_per_hour",
        ),
        (|c| c.budget_per_hour = Some(0.5), "below the fixed cost"),
        (
            |c| {
                c.budget_per_hour = Some(5.0);
                c.latency_objective_us = Some(3_000);
            },
            "not both",
        ),
        (|c| c.latency_objective_us = Some(0), "latency objective"),
        (|c| c.max_latency_ratio = 0.9, "max_latency_ratio"),
        (|c| c.demotion_threshold = 3, "demotion_threshold"),
        (|c| c.min_memory_nodes = 0, "min_memory_nodes"),
        (|c| c.recent_keys_capacity = 10, "recent_keys_capacity"),
    ];
    for (edit, needle) in table {
        let mut cfg = PolicyConfig::default();
        edit(&mut cfg);
        let err = cfg.validate().expect_err(needle);
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
    let cfg = PolicyConfig {
        memory_storage: Band::new(0.7, 0.6),
        ..PolicyConfig::default()
    };
    assert!(matches!(
        cfg.validate(),
        Err(ConfigError::Band {
            name: "memory_storage",
            ..
        })
    ));
}

#[test]
fn snapshots_and_actions_serialise_to_readable_json() {
    let mut snap = snapshot(1, 1);
    snap.latency = latency(800.0);
    snap.keys = vec![key("\0lkv\0k\u{7f}", 3, DEFAULT, false)];
    let json = serde_json::to_value(&snap).expect("serialises");
    assert_eq!(json["keys"][0]["key"], "\\x00lkv\\x00k\\x7f");
    assert_eq!(json["nodes"][0]["tier"], "memory");
    assert_eq!(json["latency"]["mean_us"], 800.0);
    assert_eq!(json["default_vector"]["disk"]["global"], 1);

    let actions = vec![
        Action::SetReplication {
            key: b"user:1".to_vec(),
            vector: Vector::new((3, 1), (1, 1)),
            reason: "hot".into(),
        },
        Action::AddNodes {
            tier: Tier::Disk,
            count: 2,
            reason: "full".into(),
        },
    ];
    let json = serde_json::to_string(&actions).expect("serialises");
    assert_eq!(
        json,
        r#"[{"action":"set_replication","key":"user:1","vector":{"memory":{"global":3,"local":1},"disk":{"global":1,"local":1}},"reason":"hot"},{"action":"add_nodes","tier":"disk","count":2,"reason":"full"}]"#
    );
}

#[test]
fn vectors_convert_to_and_from_placement() {
    let v = Vector::new((3, 2), (1, 4));
    let p: placement::ReplicationVector = v.into();
    assert_eq!(
        (p.memory.global, p.memory.local, p.disk.global, p.disk.local),
        (3, 2, 1, 4)
    );
    assert_eq!(Vector::from(p), v);
    assert_eq!(Tier::from(placement::Tier::from(Tier::Disk)), Tier::Disk);
}
