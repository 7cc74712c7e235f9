//! Runs the hmm crate's PMEM example (`hmm/examples/pmem.rs`) in the guest on a file of a
//! freshly mounted DAX ext4, and checks what it wrote.

#[path = "../../hmm/examples/pmem.rs"]
mod example;

use kernel_tests::pmem::{MNT, RestoreRaw, fsdax_mount, sh};
use kernel_tests::{require_feature, skip};

#[test]
fn pmem_example_persists_a_record_on_a_dax_file() {
    require_feature!("pmem");
    let _restore = RestoreRaw;
    let dir = match fsdax_mount(true) {
        Ok(d) => d,
        Err(why) => skip!("{why}"),
    };
    let file = dir.join("example-log");
    example::run(Some(&file)).expect("the pmem example fails");
    let text = std::fs::read(&file).unwrap();
    assert!(text.starts_with(b"hello, persistent world\n"));
    // Without a file it only lists, and finds the fsdax namespace.
    example::run(None).unwrap();
    sh("umount", &[MNT]).unwrap();
}
