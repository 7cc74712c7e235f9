//! Isolation of a job to its GPUs (`drmtool run --gpu`, `drmtool cgroup devices`): the
//! cgroup v2 device program as data ([`devprog`], over the instruction encoding in
//! [`bpf`]); choosing free GPUs ([`pick`]) and leasing them ([`lease`], `drmtool run
//! --pick`).

pub mod anchor;
pub mod bind;
pub mod bpf;
pub mod cgroup;
pub mod choose;
pub mod deny;
pub mod devprog;
pub mod env;
pub mod inspect;
pub mod job;
pub mod lease;
pub mod memlimit;
pub mod pick;
pub mod placing;
pub mod run;
pub mod slurm;
pub mod slurm_mem;
pub mod uvm;
pub mod vendor_access;
pub mod who;
