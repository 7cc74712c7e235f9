//! QEMU kernel-matrix harness (work in progress).
