//! The only unsafe code of this crate (the crate root denies `unsafe_code`, and this module
//! alone allows it): raw ioctls for negative tests ([`raw`], re-exported as
//! `kernel_tests::raw`) and the test memory the mirror device reads and writes behind the
//! compiler's back ([`mem`], whose types `kernel_tests::mem` re-exports). Every block has a
//! `// SAFETY:` line; every function exported from here is safe to call.
#![allow(unsafe_code)]

pub mod mem;
pub mod raw;
