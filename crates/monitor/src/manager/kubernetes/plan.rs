//! The Kubernetes manager's decisions, without I/O: which pod to drain, which replica
//! counts to ask for, where to send the leave, and which pods Kubernetes restarted.

use std::collections::HashMap;

use crate::manager::error::PlanError;
use crate::manager::ManagerEvent;

/// The pod a removal drains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drain {
    /// Its name (its node id).
    pub pod: String,
    /// Its ordinal: the StatefulSet's highest.
    pub ordinal: u32,
    /// True if the policy asked for another pod: a StatefulSet only ever removes its
    /// highest ordinal, so that one is drained instead.
    pub substituted: bool,
}

/// The name of pod `ordinal` of StatefulSet `statefulset`.
pub fn pod_name(statefulset: &str, ordinal: u32) -> String {
    format!("{statefulset}-{ordinal}")
}

/// The ordinal of `pod` if it is a pod of `statefulset` (`<statefulset>-<digits>`).
pub fn pod_ordinal(statefulset: &str, pod: &str) -> Option<u32> {
    let digits = pod.strip_prefix(statefulset)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Kubernetes names ordinals without leading zeros.
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

/// Which pod to drain when the policy asks to remove `requested` from a StatefulSet of
/// `replicas` pods: always the highest ordinal.
pub fn plan_removal(statefulset: &str, replicas: u32, requested: &str) -> Result<Drain, PlanError> {
    let Some(asked) = pod_ordinal(statefulset, requested) else {
        return Err(PlanError::NotAPod {
            id: requested.to_string(),
            statefulset: statefulset.to_string(),
        });
    };
    let Some(ordinal) = replicas.checked_sub(1) else {
        return Err(PlanError::NothingToRemove(statefulset.to_string()));
    };
    Ok(Drain {
        pod: pod_name(statefulset, ordinal),
        ordinal,
        substituted: asked != ordinal,
    })
}

/// The replicas that remove the drained pod `ordinal` and no other: `ordinal`, if the
/// StatefulSet still has `ordinal + 1` replicas.
pub fn scale_down_to(drain: &Drain, statefulset: &str, current: u32) -> Result<u32, PlanError> {
    let expected = drain.ordinal.saturating_add(1);
    if current == drain.ordinal {
        // Already scaled down (a retry after a lost answer).
        return Ok(current);
    }
    if current != expected {
        return Err(PlanError::ScaleChanged {
            statefulset: statefulset.to_string(),
            pod: drain.pod.clone(),
            expected,
            found: current,
        });
    }
    Ok(drain.ordinal)
}

/// The replicas after adding `count` to `current`, at most `max`.
pub fn scale_up_to(
    statefulset: &str,
    current: u32,
    count: u32,
    max: u32,
) -> Result<u32, PlanError> {
    match current.checked_add(count) {
        Some(target) if target <= max => Ok(target),
        _ => Err(PlanError::TooManyReplicas {
            statefulset: statefulset.to_string(),
            current,
            count,
            max,
        }),
    }
}

/// Expands the admin-address template: `{pod}`, `{service}`, `{namespace}`, `{pod_ip}`.
pub fn admin_address(
    template: &str,
    pod: &str,
    service: &str,
    namespace: &str,
    pod_ip: Option<&str>,
) -> Result<String, PlanError> {
    let mut addr = template
        .replace("{pod}", pod)
        .replace("{service}", service)
        .replace("{namespace}", namespace);
    if addr.contains("{pod_ip}") {
        let ip = pod_ip
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| PlanError::NoPodIp(pod.to_string()))?;
        // An IPv6 address needs brackets before the port.
        let ip = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        addr = addr.replace("{pod_ip}", &ip);
    }
    Ok(addr)
}

/// Restart counts of the pods seen last time, and what grew since.
#[derive(Debug, Default)]
pub struct RestartWatch {
    seen: HashMap<String, u32>,
}

impl RestartWatch {
    /// Compares `pods` (name, container restarts) with the last call: a pod whose count grew
    /// was restarted by Kubernetes. Only the pods given are remembered (bounded by them).
    pub fn update(&mut self, pods: &[(String, u32)]) -> Vec<ManagerEvent> {
        let mut events = Vec::new();
        let mut seen = HashMap::with_capacity(pods.len());
        for (pod, restarts) in pods {
            if self.seen.get(pod).is_some_and(|before| restarts > before) {
                events.push(ManagerEvent::Restarted {
                    id: pod.clone(),
                    restarts: *restarts,
                });
            }
            seen.insert(pod.clone(), *restarts);
        }
        self.seen = seen;
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STS: &str = "latticekv-memory";

    #[test]
    fn pod_names_and_ordinals() {
        assert_eq!(pod_name(STS, 3), "latticekv-memory-3");
        assert_eq!(pod_ordinal(STS, "latticekv-memory-3"), Some(3));
        assert_eq!(pod_ordinal(STS, "latticekv-memory-12"), Some(12));
        for not_ours in [
            "latticekv-memory",
            "latticekv-memory-",
            "latticekv-memory-x",
            "latticekv-memory-01",
            "latticekv-memory-+1",
            "latticekv-disk-1",
            "latticekv-memoryx-1",
            "latticekv-memory-99999999999",
            "mem1",
        ] {
            assert_eq!(pod_ordinal(STS, not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn the_highest_ordinal_is_drained_whatever_was_asked() {
        let d = plan_removal(STS, 3, "latticekv-memory-2").unwrap();
        assert_eq!(
            (d.pod.as_str(), d.ordinal, d.substituted),
            ("latticekv-memory-2", 2, false)
        );
        let d = plan_removal(STS, 3, "latticekv-memory-0").unwrap();
        assert_eq!(
            (d.pod.as_str(), d.ordinal, d.substituted),
            ("latticekv-memory-2", 2, true)
        );
        // A stale id above the replicas (a pod already going away) is substituted too.
        assert!(
            plan_removal(STS, 3, "latticekv-memory-7")
                .unwrap()
                .substituted
        );
        assert_eq!(
            plan_removal(STS, 0, "latticekv-memory-0"),
            Err(PlanError::NothingToRemove(STS.into()))
        );
        assert!(matches!(
            plan_removal(STS, 3, "mem1"),
            Err(PlanError::NotAPod { .. })
        ));
    }

    #[test]
    fn scaling_down_removes_only_the_drained_pod() {
        let d = plan_removal(STS, 3, "latticekv-memory-2").unwrap();
        assert_eq!(scale_down_to(&d, STS, 3), Ok(2));
        assert_eq!(scale_down_to(&d, STS, 2), Ok(2), "already done");
        // Someone scaled up meanwhile: replicas 2 would remove pod 3 as well.
        assert!(matches!(
            scale_down_to(&d, STS, 4),
            Err(PlanError::ScaleChanged {
                expected: 3,
                found: 4,
                ..
            })
        ));
        assert!(scale_down_to(&d, STS, 1).is_err());
    }

    #[test]
    fn scaling_up_is_capped() {
        assert_eq!(scale_up_to(STS, 2, 3, 10), Ok(5));
        assert_eq!(scale_up_to(STS, 2, 8, 10), Ok(10));
        assert!(scale_up_to(STS, 2, 9, 10).is_err());
        assert!(scale_up_to(STS, u32::MAX, 1, u32::MAX).is_err());
    }

    #[test]
    fn admin_addresses_expand_the_template() {
        let dns = "{pod}.{service}.{namespace}.svc:7700";
        assert_eq!(
            admin_address(dns, "lkv-memory-1", "lkv", "prod", None).unwrap(),
            "lkv-memory-1.lkv.prod.svc:7700"
        );
        assert_eq!(
            admin_address("{pod_ip}:7700", "p", "s", "n", Some("10.1.2.3")).unwrap(),
            "10.1.2.3:7700"
        );
        assert_eq!(
            admin_address("{pod_ip}:7700", "p", "s", "n", Some("fd00::1")).unwrap(),
            "[fd00::1]:7700"
        );
        assert_eq!(
            admin_address("{pod_ip}:7700", "p", "s", "n", Some("")),
            Err(PlanError::NoPodIp("p".into()))
        );
    }

    #[test]
    fn restarts_are_reported_when_a_count_grows() {
        let mut w = RestartWatch::default();
        let pods = |a: u32, b: u32| vec![("p-0".to_string(), a), ("p-1".to_string(), b)];
        assert!(
            w.update(&pods(0, 2)).is_empty(),
            "the first look reports nothing"
        );
        assert!(w.update(&pods(0, 2)).is_empty());
        assert_eq!(
            w.update(&pods(1, 2)),
            vec![ManagerEvent::Restarted {
                id: "p-0".into(),
                restarts: 1
            }]
        );
        // p-1 went away and came back (a new pod): not a restart of the old one.
        assert!(w.update(&[("p-0".to_string(), 1)]).is_empty());
        assert!(w.update(&pods(1, 0)).is_empty());
    }
}
