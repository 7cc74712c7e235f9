//! Choosing a set of GPUs for one multi-GPU job: the set whose GPUs are nearest each other
//! (the worst class between two of them lowest), then the cheapest (the sum of its members'
//! [`cost`](super::cost)s), then the lowest indices.
//!
//! That is a search over sets, not a flow (one job on several GPUs at once is set packing):
//! exact, by trying every set, while there are at most [`EXACT_MAX`] of them; beyond, a
//! stated heuristic ([`Search::Greedy`]): from every GPU as a seed, add the GPU nearest the
//! set so far (its worst class to a member lowest, then its cost, then its index) until the
//! set is full, and keep the best set of all seeds. The greedy set can be worse than the
//! best one; it is reported as greedy, never as exact.
//!
//! ```
//! use drmtool::place::group::{best, Search};
//! use drmtool::topo::Class;
//! // GPUs 0 and 1 share a switch; 2 is across the socket but idle.
//! let pair = |a: usize, b: usize| if a + b == 1 { Some(Class::Pix) } else { Some(Class::Sys) };
//! let g = best(&[5, 5, 0], 2, &pair).unwrap();
//! assert_eq!((g.members, g.worst, g.search), (vec![0, 1], Some(Class::Pix), Search::Exact));
//! ```

use super::cost::class_rank;
use crate::topo::Class;
use serde::Serialize;

/// The most sets tried one by one; beyond, the greedy search.
pub const EXACT_MAX: u64 = 100_000;

/// How a group was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Search {
    /// Every set tried: the best there is.
    Exact,
    /// The greedy heuristic (see the [module](self) docs): a good set, maybe not the best.
    Greedy,
}

/// The set chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// Its GPUs (indices into the costs given), ascending.
    pub members: Vec<usize>,
    /// The worst class between two members (`None`: some pair has none, such as a GPU not
    /// on PCI; for one member, `X`).
    pub worst: Option<Class>,
    /// Its members' costs summed.
    pub cost: u64,
    /// How it was found.
    pub search: Search,
}

/// The rank of the worst class among `members` (6 for a pair without a class).
fn worst_rank(members: &[usize], pair: &dyn Fn(usize, usize) -> Option<Class>) -> u64 {
    let mut w = 0;
    for (i, &a) in members.iter().enumerate() {
        for &b in &members[i + 1..] {
            w = w.max(class_rank(pair(a, b)));
        }
    }
    w
}

/// The class of a rank, the inverse of [`class_rank`].
fn rank_class(r: u64) -> Option<Class> {
    Class::ALL.into_iter().find(|&c| class_rank(Some(c)) == r)
}

/// The key a set is ranked by: worst class, cost, members.
fn key(
    members: &[usize],
    costs: &[u64],
    pair: &dyn Fn(usize, usize) -> Option<Class>,
) -> (u64, u64, Vec<usize>) {
    let cost = members
        .iter()
        .fold(0u64, |s, &m| s.saturating_add(costs[m]));
    (worst_rank(members, pair), cost, members.to_vec())
}

/// How many sets of `n` there are among `m`, or `None` past `limit`.
fn sets_within(m: usize, n: usize, limit: u64) -> Option<u64> {
    let mut c: u64 = 1;
    for i in 0..n as u64 {
        // C(m, i+1) = C(m, i) * (m - i) / (i + 1), exact at every step.
        c = c.checked_mul(m as u64 - i)? / (i + 1);
        if c > limit {
            return None;
        }
    }
    Some(c)
}

/// The best set of `n` among the GPUs whose costs are `costs` (`pair(a, b)`: the class
/// between GPUs `a` and `b`); `None` when there are fewer than `n` GPUs or `n` is 0.
pub fn best(
    costs: &[u64],
    n: usize,
    pair: &dyn Fn(usize, usize) -> Option<Class>,
) -> Option<Group> {
    let m = costs.len();
    if n == 0 || n > m {
        return None;
    }
    let (k, search) = if sets_within(m, n, EXACT_MAX).is_some() {
        (exact(costs, n, pair), Search::Exact)
    } else {
        (greedy(costs, n, pair), Search::Greedy)
    };
    let (worst, cost, members) = k;
    Some(Group {
        worst: if members.len() == 1 {
            Some(Class::Same)
        } else {
            rank_class(worst)
        },
        members,
        cost,
        search,
    })
}

/// Every set of `n`, in lexicographic order; the least key.
fn exact(
    costs: &[u64],
    n: usize,
    pair: &dyn Fn(usize, usize) -> Option<Class>,
) -> (u64, u64, Vec<usize>) {
    let m = costs.len();
    let mut set: Vec<usize> = (0..n).collect();
    let mut best = key(&set, costs, pair);
    loop {
        // The next set: raise the last member that can still rise, reset those after it.
        let Some(i) = (0..n).rev().find(|&i| set[i] < m - n + i) else {
            return best;
        };
        set[i] += 1;
        for j in i + 1..n {
            set[j] = set[j - 1] + 1;
        }
        let k = key(&set, costs, pair);
        if k < best {
            best = k;
        }
    }
}

/// The greedy heuristic of the [module](self) docs.
fn greedy(
    costs: &[u64],
    n: usize,
    pair: &dyn Fn(usize, usize) -> Option<Class>,
) -> (u64, u64, Vec<usize>) {
    let m = costs.len();
    let mut best: Option<(u64, u64, Vec<usize>)> = None;
    for seed in 0..m {
        let mut set = vec![seed];
        while set.len() < n {
            let next = (0..m).filter(|c| !set.contains(c)).min_by_key(|&c| {
                let w = set
                    .iter()
                    .map(|&s| class_rank(pair(s, c)))
                    .max()
                    .unwrap_or(0);
                (w, costs[c], c)
            });
            match next {
                Some(c) => set.push(c),
                None => break,
            }
        }
        set.sort_unstable();
        let k = key(&set, costs, pair);
        if best.as_ref().is_none_or(|b| k < *b) {
            best = Some(k);
        }
    }
    // m >= n >= 1, so some seed ran.
    best.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPUs on a two-socket machine: switch A holds 0-3, switch B 4-7 (both on node 0),
    /// switch C 8-11 on node 1.
    fn pair(a: usize, b: usize) -> Option<Class> {
        let sw = |g: usize| g / 4;
        Some(if a == b {
            Class::Same
        } else if sw(a) == sw(b) {
            Class::Pix
        } else if sw(a) < 2 && sw(b) < 2 {
            Class::Phb
        } else {
            Class::Sys
        })
    }

    #[test]
    fn the_exact_search_prefers_one_switch_over_idle_gpus_apart() {
        let mut costs = vec![100u64; 12];
        costs[0] = 0;
        costs[8] = 0;
        let g = best(&costs, 2, &pair).unwrap();
        assert_eq!(g.search, Search::Exact);
        assert_eq!(g.worst, Some(Class::Pix));
        assert_eq!(g.members, vec![0, 1]);
        assert_eq!(g.cost, 100);
    }

    #[test]
    fn too_few_gpus_or_none_wanted_is_no_group() {
        assert_eq!(best(&[1, 2], 3, &pair), None);
        assert_eq!(best(&[1, 2], 0, &pair), None);
        let one = best(&[3, 1], 1, &pair).unwrap();
        assert_eq!((one.members, one.worst), (vec![1], Some(Class::Same)));
    }

    #[test]
    fn a_pair_without_a_class_ranks_after_sys() {
        let pair = |a: usize, b: usize| {
            if a.min(b) == 0 {
                None
            } else {
                Some(Class::Sys)
            }
        };
        let g = best(&[0, 5, 5], 2, &pair).unwrap();
        assert_eq!((g.members, g.worst), (vec![1, 2], Some(Class::Sys)));
        let g = best(&[0, 5], 2, &pair).unwrap();
        assert_eq!(g.worst, None);
    }

    /// The best key by brute force over every subset (bit masks).
    fn brute(costs: &[u64], n: usize) -> (u64, u64) {
        let m = costs.len();
        (0u32..1 << m)
            .filter(|s| s.count_ones() as usize == n)
            .map(|s| {
                let v: Vec<usize> = (0..m).filter(|i| s & (1 << i) != 0).collect();
                let (w, c, _) = key(&v, costs, &pair);
                (w, c)
            })
            .min()
            .unwrap()
    }

    #[test]
    fn exact_equals_brute_force_and_greedy_is_never_better() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..300 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let m = 2 + (state % 11) as usize;
            let n = 1 + (state >> 8) as usize % m;
            let costs: Vec<u64> = (0..m).map(|i| (state >> (i % 50)) % 7).collect();
            let want = brute(&costs, n);
            let e = exact(&costs, n, &pair);
            assert_eq!((e.0, e.1), want, "exact, {costs:?} n={n}");
            let g = greedy(&costs, n, &pair);
            assert!(
                (g.0, g.1) >= want,
                "greedy beat brute force: {costs:?} n={n}"
            );
            assert_eq!(g.2.len(), n);
        }
    }

    #[test]
    fn past_the_exact_limit_the_search_says_greedy() {
        // C(64, 8) is far past EXACT_MAX.
        let costs = vec![1u64; 64];
        let pair = |a: usize, b: usize| {
            Some(if a / 8 == b / 8 {
                Class::Pix
            } else {
                Class::Sys
            })
        };
        let g = best(&costs, 8, &pair).unwrap();
        assert_eq!(g.search, Search::Greedy);
        // Eight GPUs on one switch exist, and the greedy search finds them.
        assert_eq!(g.worst, Some(Class::Pix));
        assert_eq!(g.members, (0..8).collect::<Vec<_>>());
    }
}
