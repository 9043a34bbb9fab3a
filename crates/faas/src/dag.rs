//! DAG validation and order. Pure: no I/O.
//!
//! A valid DAG has at least one function, no duplicate functions or edges, edges only
//! between its functions, no cycle, is connected (as an undirected graph), and has exactly
//! one sink (a function with no downstream function): the sink's result is the call's.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::pb;

/// A validated DAG: its functions in a topological order, and each one's upstreams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Functions in a topological order (every function after its upstreams).
    pub order: Vec<String>,
    /// Each function's upstream functions, in the order of the DAG's edges: their results
    /// are passed first, in this order, before the function's own arguments.
    pub upstream: BTreeMap<String, Vec<String>>,
    /// The one function with no downstream.
    pub sink: String,
}

/// Why a DAG is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DagError {
    /// No functions.
    #[error("a DAG needs at least one function")]
    Empty,
    /// An empty name.
    #[error("a DAG needs a name")]
    NoName,
    /// A function listed twice.
    #[error("function {0:?} is listed twice")]
    DuplicateFunction(String),
    /// An edge to or from a function the DAG does not list.
    #[error("edge {0:?} -> {1:?} names a function not in the DAG")]
    UnknownFunction(String, String),
    /// An edge listed twice, or from a function to itself.
    #[error("edge {0:?} -> {1:?} is a duplicate or a self-loop")]
    BadEdge(String, String),
    /// A cycle.
    #[error("the DAG has a cycle")]
    Cycle,
    /// More than one connected component.
    #[error("the DAG is not connected")]
    NotConnected,
    /// Zero or several sinks.
    #[error("a DAG has exactly one sink (function with no downstream); this one has {0:?}")]
    Sinks(Vec<String>),
}

/// Validates `dag` and returns its plan.
///
/// # Errors
/// The first rule `dag` breaks.
pub fn validate(dag: &pb::Dag) -> Result<Plan, DagError> {
    if dag.name.is_empty() {
        return Err(DagError::NoName);
    }
    if dag.functions.is_empty() {
        return Err(DagError::Empty);
    }
    let mut functions = BTreeSet::new();
    for f in &dag.functions {
        if !functions.insert(f.as_str()) {
            return Err(DagError::DuplicateFunction(f.clone()));
        }
    }
    let mut upstream: BTreeMap<String, Vec<String>> = dag
        .functions
        .iter()
        .map(|f| (f.clone(), Vec::new()))
        .collect();
    let mut downstream: BTreeMap<&str, Vec<&str>> =
        functions.iter().map(|f| (*f, Vec::new())).collect();
    let mut seen = BTreeSet::new();
    for e in &dag.edges {
        let (from, to) = (e.from.as_str(), e.to.as_str());
        if !functions.contains(from) || !functions.contains(to) {
            return Err(DagError::UnknownFunction(e.from.clone(), e.to.clone()));
        }
        if from == to || !seen.insert((from, to)) {
            return Err(DagError::BadEdge(e.from.clone(), e.to.clone()));
        }
        upstream
            .entry(e.to.clone())
            .or_default()
            .push(e.from.clone());
        downstream.entry(from).or_default().push(to);
    }
    // Kahn's algorithm, in the order functions are listed (deterministic).
    let mut indegree: BTreeMap<&str, usize> = upstream
        .iter()
        .map(|(f, u)| (f.as_str(), u.len()))
        .collect();
    let mut ready: VecDeque<&str> = dag
        .functions
        .iter()
        .map(String::as_str)
        .filter(|f| indegree[f] == 0)
        .collect();
    let mut order = Vec::with_capacity(dag.functions.len());
    while let Some(f) = ready.pop_front() {
        order.push(f.to_string());
        for d in &downstream[f] {
            let n = indegree.get_mut(d).expect("edge endpoints are functions");
            *n -= 1;
            if *n == 0 {
                ready.push_back(d);
            }
        }
    }
    if order.len() != dag.functions.len() {
        return Err(DagError::Cycle);
    }
    // Connected: a walk over edges in both directions reaches every function.
    let mut reached = BTreeSet::new();
    let mut stack = vec![dag.functions[0].as_str()];
    while let Some(f) = stack.pop() {
        if !reached.insert(f) {
            continue;
        }
        stack.extend(downstream[f].iter().copied());
        stack.extend(upstream[f].iter().map(String::as_str));
    }
    if reached.len() != functions.len() {
        return Err(DagError::NotConnected);
    }
    let sinks: Vec<String> = dag
        .functions
        .iter()
        .filter(|f| downstream[f.as_str()].is_empty())
        .cloned()
        .collect();
    if sinks.len() != 1 {
        return Err(DagError::Sinks(sinks));
    }
    Ok(Plan {
        order,
        upstream,
        sink: sinks[0].clone(),
    })
}

/// The DAG of one function called on its own.
pub fn single(function: &str) -> pb::Dag {
    pb::Dag {
        name: function.to_string(),
        functions: vec![function.to_string()],
        edges: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dag(functions: &[&str], edges: &[(&str, &str)]) -> pb::Dag {
        pb::Dag {
            name: "d".into(),
            functions: functions.iter().map(|f| f.to_string()).collect(),
            edges: edges
                .iter()
                .map(|(a, b)| pb::Edge {
                    from: a.to_string(),
                    to: b.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_linear_dag_runs_in_edge_order() {
        let p = validate(&dag(&["c", "b", "a"], &[("a", "b"), ("b", "c")])).unwrap();
        assert_eq!(p.order, ["a", "b", "c"]);
        assert_eq!(p.sink, "c");
        assert_eq!(p.upstream["c"], ["b"]);
        assert!(p.upstream["a"].is_empty());
    }

    #[test]
    fn a_v_shaped_dag_passes_upstreams_in_edge_order() {
        let p = validate(&dag(&["l", "r", "s"], &[("r", "s"), ("l", "s")])).unwrap();
        assert_eq!(p.sink, "s");
        assert_eq!(p.upstream["s"], ["r", "l"]);
        assert_eq!(p.order.last().unwrap(), "s");
    }

    #[test]
    fn one_function_is_a_dag() {
        let p = validate(&single("f")).unwrap();
        assert_eq!(p.order, ["f"]);
        assert_eq!(p.sink, "f");
    }

    #[test]
    fn invalid_dags_are_refused_with_the_rule_they_break() {
        assert_eq!(validate(&dag(&[], &[])), Err(DagError::Empty));
        assert_eq!(
            validate(&dag(&["a", "a"], &[])),
            Err(DagError::DuplicateFunction("a".into()))
        );
        assert_eq!(
            validate(&dag(&["a"], &[("a", "x")])),
            Err(DagError::UnknownFunction("a".into(), "x".into()))
        );
        assert_eq!(
            validate(&dag(&["a", "b"], &[("a", "b"), ("a", "b")])),
            Err(DagError::BadEdge("a".into(), "b".into()))
        );
        assert_eq!(
            validate(&dag(&["a"], &[("a", "a")])),
            Err(DagError::BadEdge("a".into(), "a".into()))
        );
        assert_eq!(
            validate(&dag(
                &["a", "b", "c"],
                &[("a", "b"), ("b", "c"), ("c", "a")]
            )),
            Err(DagError::Cycle)
        );
        assert_eq!(
            validate(&dag(&["a", "b", "c", "d"], &[("a", "b"), ("c", "d")])),
            Err(DagError::NotConnected)
        );
        assert_eq!(
            validate(&dag(&["a", "b", "c"], &[("a", "b"), ("a", "c")])),
            Err(DagError::Sinks(vec!["b".into(), "c".into()]))
        );
        let mut nameless = single("f");
        nameless.name.clear();
        assert_eq!(validate(&nameless), Err(DagError::NoName));
    }
}
