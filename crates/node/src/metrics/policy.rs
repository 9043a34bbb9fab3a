//! The elasticity monitor's metrics. The monitor is a process of its own (or a thread of
//! `latticekv local`) without an HTTP port: each round it reports its totals and its last
//! observations to every node it polls (`PolicyReport`), and each node exports the latest
//! report it holds. Every polled node therefore shows the same figures under its own
//! `node` label: aggregate them with `max`, not `sum`.

use wire::pb::PolicyReport;

use super::Out;

/// Appends the monitor's families to `o` (nothing before the first report).
pub(super) fn render(o: &mut Out, report: Option<&PolicyReport>, now_ms: u64) {
    let Some(r) = report else {
        return;
    };
    o.one(
        "policy_rounds_total",
        "counter",
        "Rounds the elasticity monitor has run (as it last reported).",
        r.rounds,
    );
    o.head(
        "policy_actions_total",
        "counter",
        "Actions the policy decided, by kind (carried out or not).",
    );
    for (kind, n) in [
        ("set_replication", r.set_replication_total),
        ("reset_replication", r.reset_replication_total),
        ("add_nodes", r.add_nodes_total),
        ("remove_node", r.remove_node_total),
    ] {
        o.labelled("policy_actions_total", &format!("kind=\"{kind}\""), n);
    }
    o.one(
        "policy_failed_actions_total",
        "counter",
        "Policy actions whose execution failed (node actions without a cluster manager).",
        r.failed_actions_total,
    );
    o.one(
        "policy_nodes_requested_total",
        "counter",
        "Nodes the cluster manager accepted to start.",
        r.nodes_requested_total,
    );
    o.one(
        "policy_nodes_removed_total",
        "counter",
        "Nodes the cluster manager removed.",
        r.nodes_removed_total,
    );
    o.one(
        "policy_hot_keys",
        "gauge",
        "Keys above the hotness threshold in the monitor's last round.",
        r.hot_keys,
    );
    o.one(
        "policy_observed_latency_seconds",
        "gauge",
        "L_obs: the mean latency the policy judged in its last round (0: too few requests).",
        r.observed_latency_us / 1e6,
    );
    o.one(
        "policy_latency_objective_seconds",
        "gauge",
        "L_obj: the policy's latency objective.",
        r.latency_objective_us / 1e6,
    );
    o.one(
        "policy_dry_run",
        "gauge",
        "1 if the monitor only prints what it would do.",
        u8::from(r.dry_run),
    );
    o.one(
        "policy_report_age_seconds",
        "gauge",
        "Seconds since the monitor sent its last report (by the two wall clocks).",
        now_ms.saturating_sub(r.sent_ms) as f64 / 1e3,
    );
}
