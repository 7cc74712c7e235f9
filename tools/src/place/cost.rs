//! The one cost model of placing: what a job pays on a GPU, from where the GPU sits against
//! what the job wants near and how busy the GPU is. `pick --near`, `run --pick --near` and
//! `drmtool place` all rank by it.
//!
//! The terms, compared in this order (an earlier term always outweighs every later one):
//!
//! | term | figure | weight |
//! |---|---|---|
//! | class | the GPU's [`Class`] to the `--near` place: X 0, PIX 1, PXB 2, PHB 3, NODE 4, SYS 5, unknown 6 (a GPU not on PCI, or no node to compare); 0 for every GPU without `--near` | 10^8 |
//! | leases | lease holders on the GPU now, at most 9 counted | 10^7 |
//! | clients | open DRM files on it, at most 99 counted; unknown counts 99 | 10^5 |
//! | memory | memory its clients hold, in 64 MiB steps, at most 99,999 counted (6.1 TiB); unknown counts 99,999 | 1 |
//!
//! A placement so costs at most about 7 × 10^8, under 2^30; a job that waits costs
//! [`WAIT_COST`] (2^40), more than any chain of placements the flow can trade for it with
//! up to [`GPUS_MAX`] GPUs, so a job that can be placed is never left waiting.
//!
//! ```
//! use drmtool::place::cost::{Terms, cost};
//! use drmtool::topo::Class;
//! let near = Terms { class: Some(Class::Pix), near: true, leases: 0, clients: Some(1), memory: Some(0) };
//! let far = Terms { class: Some(Class::Sys), near: true, leases: 0, clients: Some(0), memory: Some(0) };
//! assert!(cost(&near) < cost(&far));
//! ```

use crate::topo::Class;
use serde::Serialize;

/// A waiting job's cost (see the [module](self) docs).
pub const WAIT_COST: u64 = 1 << 40;

/// The most GPUs one placement takes into account (beyond, a wait could be traded for a
/// chain of placements worth more than it).
pub const GPUS_MAX: usize = 1024;

/// The step in which memory held counts.
pub const MEMORY_STEP: u64 = 64 << 20;

/// What one job's cost on one GPU is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Terms {
    /// The GPU's class to the place the job wants near (`None`: unknown, or no `--near`).
    pub class: Option<Class>,
    /// Whether the job named a place (without one the class term is 0 for every GPU).
    pub near: bool,
    /// Lease holders on the GPU now.
    pub leases: usize,
    /// Open DRM files on it (`None`: unknown).
    pub clients: Option<usize>,
    /// Bytes its clients hold (`None`: unknown).
    pub memory: Option<u64>,
}

/// A class's rank: X 0 .. SYS 5, unknown 6.
pub fn class_rank(c: Option<Class>) -> u64 {
    match c {
        Some(Class::Same) => 0,
        Some(Class::Pix) => 1,
        Some(Class::Pxb) => 2,
        Some(Class::Phb) => 3,
        Some(Class::Node) => 4,
        Some(Class::Sys) => 5,
        None => 6,
    }
}

/// The cost of `t` (see the [module](self) docs).
pub fn cost(t: &Terms) -> u64 {
    let class = if t.near { class_rank(t.class) } else { 0 };
    let leases = t.leases.min(9) as u64;
    let clients = t.clients.map_or(99, |c| c.min(99) as u64);
    let memory = t.memory.map_or(99_999, |m| (m / MEMORY_STEP).min(99_999));
    class * 100_000_000 + leases * 10_000_000 + clients * 100_000 + memory
}

/// The most a placement can cost.
pub const PLACEMENT_MAX: u64 = 6 * 100_000_000 + 9 * 10_000_000 + 99 * 100_000 + 99_999;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(
        class: Option<Class>,
        leases: usize,
        clients: Option<usize>,
        memory: Option<u64>,
    ) -> Terms {
        Terms {
            class,
            near: true,
            leases,
            clients,
            memory,
        }
    }

    #[test]
    fn each_term_outweighs_every_later_one_at_its_cap() {
        // One class step beats the worst of everything below it.
        assert!(
            cost(&t(Some(Class::Pix), 9, None, None))
                < cost(&t(Some(Class::Pxb), 0, Some(0), Some(0)))
        );
        assert!(cost(&t(Some(Class::Sys), 9, None, None)) < cost(&t(None, 0, Some(0), Some(0))));
        assert!(
            cost(&t(Some(Class::Pix), 0, None, None))
                < cost(&t(Some(Class::Pix), 1, Some(0), Some(0)))
        );
        assert!(
            cost(&t(Some(Class::Pix), 0, Some(0), None))
                < cost(&t(Some(Class::Pix), 0, Some(1), Some(0)))
        );
        assert_eq!(cost(&t(None, 99, None, None)), PLACEMENT_MAX);
    }

    #[test]
    fn without_near_the_class_counts_nothing() {
        let mut a = t(None, 0, Some(0), Some(0));
        a.near = false;
        assert_eq!(cost(&a), 0);
    }

    #[test]
    fn waiting_outweighs_a_chain_of_placements_on_every_gpu() {
        assert!(PLACEMENT_MAX * (GPUS_MAX as u64 + 1) < WAIT_COST);
    }
}
