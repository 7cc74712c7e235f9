//! Placing GPU jobs where they cost least (issue 30, under way): the solver first.
//!
//! [`flow`] assigns single-GPU jobs to GPUs with capacities at the least total cost, exactly
//! (a minimum-cost flow with a wait arc for what cannot be placed now). The costs it takes
//! are the caller's: the topology classes, data locality and use that make them, `pick
//! --near`, `drmtool place` and multi-GPU requests (set packing, searched apart) are not
//! built yet.

pub mod flow;
