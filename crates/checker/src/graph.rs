//! A directed graph over dense node ids with strongly connected components (iterative Tarjan)
//! and a topological order (Kahn), the two order helpers the checkers build on.

/// A directed graph with nodes `0..len`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Graph {
    adj: Vec<Vec<usize>>,
}

impl Graph {
    /// A graph of `len` nodes and no edges.
    pub fn new(len: usize) -> Self {
        Self {
            adj: vec![Vec::new(); len],
        }
    }

    /// Adds a node and returns its id.
    pub fn add_node(&mut self) -> usize {
        self.adj.push(Vec::new());
        self.adj.len() - 1
    }

    /// Adds the edge `from → to` (duplicates are harmless).
    pub fn add_edge(&mut self, from: usize, to: usize) {
        self.adj[from].push(to);
    }

    /// The strongly connected component of each node, as a component number. Components are
    /// numbered in reverse topological order of the condensation (Tarjan's order).
    pub fn components(&self) -> Vec<usize> {
        const UNSEEN: usize = usize::MAX;
        let n = self.adj.len();
        let mut index = vec![UNSEEN; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut component = vec![UNSEEN; n];
        let mut stack = Vec::new();
        let mut next_index = 0;
        let mut next_component = 0;
        // Call frames of the depth-first search: (node, next successor position).
        let mut frames: Vec<(usize, usize)> = Vec::new();
        for root in 0..n {
            if index[root] != UNSEEN {
                continue;
            }
            frames.push((root, 0));
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some(&mut (node, ref mut pos)) = frames.last_mut() {
                if let Some(&succ) = self.adj[node].get(*pos) {
                    *pos += 1;
                    if index[succ] == UNSEEN {
                        index[succ] = next_index;
                        low[succ] = next_index;
                        next_index += 1;
                        stack.push(succ);
                        on_stack[succ] = true;
                        frames.push((succ, 0));
                    } else if on_stack[succ] {
                        low[node] = low[node].min(index[succ]);
                    }
                    continue;
                }
                frames.pop();
                if let Some(&(parent, _)) = frames.last() {
                    low[parent] = low[parent].min(low[node]);
                }
                if low[node] == index[node] {
                    // Invariant: `node` is on the stack, so the loop ends at it.
                    while let Some(member) = stack.pop() {
                        on_stack[member] = false;
                        component[member] = next_component;
                        if member == node {
                            break;
                        }
                    }
                    next_component += 1;
                }
            }
        }
        component
    }

    /// The components (as from [`Graph::components`]) that hold a cycle: more than one node, or
    /// a self-loop. Returns, per component number, whether it is cyclic.
    pub fn cyclic_components(&self, component: &[usize]) -> Vec<bool> {
        let count = component.iter().map(|&c| c + 1).max().unwrap_or(0);
        let mut size = vec![0usize; count];
        let mut cyclic = vec![false; count];
        for (node, &c) in component.iter().enumerate() {
            size[c] += 1;
            if self.adj[node].contains(&node) {
                cyclic[c] = true;
            }
        }
        for (c, s) in size.iter().enumerate() {
            cyclic[c] |= *s > 1;
        }
        cyclic
    }

    /// A topological order (Kahn's algorithm). Nodes on a cycle, or reachable from one, are
    /// left out.
    pub fn topological_order(&self) -> Vec<usize> {
        let n = self.adj.len();
        let mut indegree = vec![0usize; n];
        for succs in &self.adj {
            for &s in succs {
                indegree[s] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..n).rev().filter(|&v| indegree[v] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(node) = ready.pop() {
            order.push(node);
            for &s in &self.adj[node] {
                indegree[s] -= 1;
                if indegree[s] == 0 {
                    ready.push(s);
                }
            }
        }
        order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_find_cycles_only() {
        let mut g = Graph::new(6);
        for (a, b) in [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (5, 5)] {
            g.add_edge(a, b);
        }
        let comp = g.components();
        assert_eq!(comp[0], comp[1]);
        assert_eq!(comp[1], comp[2]);
        assert_ne!(comp[2], comp[3]);
        assert_ne!(comp[3], comp[4]);
        let cyclic = g.cyclic_components(&comp);
        assert!(cyclic[comp[0]] && cyclic[comp[5]]);
        assert!(!cyclic[comp[3]] && !cyclic[comp[4]]);
        // Tarjan numbers a component after every component it reaches.
        assert!(comp[0] > comp[3] && comp[3] > comp[4]);
    }

    #[test]
    fn topological_order_respects_edges_and_drops_cycles() {
        let mut g = Graph::new(5);
        for (a, b) in [(3, 1), (1, 0), (3, 0), (2, 4), (4, 2)] {
            g.add_edge(a, b);
        }
        let order = g.topological_order();
        assert_eq!(order, vec![3, 1, 0]);
    }

    #[test]
    fn deep_chains_do_not_overflow_the_stack() {
        let n = 200_000;
        let mut g = Graph::new(n);
        for v in 0..n - 1 {
            g.add_edge(v, v + 1);
        }
        g.add_edge(n - 1, 0);
        let comp = g.components();
        assert!(comp.iter().all(|&c| c == comp[0]));
    }
}
