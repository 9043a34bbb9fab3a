//! The shape of a DAG as the cache logic sees it: each function's read keyset `R̃_i` and
//! its upstream functions. Functions are listed in topological order (every parent before
//! its children) and the last one is the single sink (P:79).

use thiserror::Error as ThisError;

use crate::KeySet;

/// One function of a DAG.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FnSpec {
    /// `R̃_i`: the keys the function reads (from its key-reference arguments, P:433).
    pub reads: KeySet,
    /// Indices of its upstream functions (all smaller than its own index).
    pub parents: Vec<usize>,
}

/// A DAG of functions; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dag {
    fns: Vec<FnSpec>,
}

/// Why [`Dag::new`] refused a shape.
#[derive(Clone, Debug, PartialEq, Eq, ThisError)]
pub enum DagError {
    /// No functions.
    #[error("a DAG needs at least one function")]
    Empty,
    /// Function `at` names a parent that is not listed before it.
    #[error("function {at} has a parent that is not listed before it")]
    ParentOrder {
        /// The function.
        at: usize,
    },
    /// A function other than the last has no children (a DAG has one sink).
    #[error("function {at} has no downstream function but is not the sink")]
    SecondSink {
        /// The function.
        at: usize,
    },
}

impl Dag {
    /// A DAG from its functions in topological order; the last one is the sink.
    ///
    /// # Errors
    /// [`DagError`] if empty, not topologically ordered, or with more than one sink.
    pub fn new(fns: Vec<FnSpec>) -> Result<Self, DagError> {
        if fns.is_empty() {
            return Err(DagError::Empty);
        }
        for (at, f) in fns.iter().enumerate() {
            if f.parents.iter().any(|&p| p >= at) {
                return Err(DagError::ParentOrder { at });
            }
        }
        for at in 0..fns.len() - 1 {
            if !fns.iter().any(|f| f.parents.contains(&at)) {
                return Err(DagError::SecondSink { at });
            }
        }
        Ok(Dag { fns })
    }

    /// A chain: function `i` triggers function `i + 1`.
    pub fn linear(reads: Vec<KeySet>) -> Self {
        let fns = reads
            .into_iter()
            .enumerate()
            .map(|(i, reads)| FnSpec {
                reads,
                parents: if i == 0 { vec![] } else { vec![i - 1] },
            })
            .collect::<Vec<_>>();
        let fns = if fns.is_empty() {
            vec![FnSpec::default()]
        } else {
            fns
        };
        Dag { fns }
    }

    /// Parallel source functions that all feed one sink (the paper's V-shaped DAG with two
    /// branches).
    pub fn fan_in(branches: Vec<KeySet>, sink: KeySet) -> Self {
        let n = branches.len();
        let mut fns: Vec<FnSpec> = branches
            .into_iter()
            .map(|reads| FnSpec {
                reads,
                parents: vec![],
            })
            .collect();
        fns.push(FnSpec {
            reads: sink,
            parents: (0..n).collect(),
        });
        Dag { fns }
    }

    /// The functions, in topological order.
    pub fn fns(&self) -> &[FnSpec] {
        &self.fns
    }

    /// The index of the sink (the last function).
    pub fn sink(&self) -> usize {
        self.fns.len() - 1
    }

    /// `R̃_DAG`: the union of the functions' read keysets.
    pub fn rdag(&self) -> KeySet {
        self.fns
            .iter()
            .flat_map(|f| f.reads.iter().cloned())
            .collect()
    }
}
