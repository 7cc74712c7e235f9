//! Runs the hmm crate's examples (`hmm/examples/*.rs`) in the guest, where they must find
//! the devices and do real work.

#[path = "../../hmm/examples/dmirror.rs"]
mod dmirror;
#[path = "../../hmm/examples/register.rs"]
mod register;
#[path = "../../hmm/examples/udmabuf.rs"]
mod udmabuf;

use kernel_tests::{require_feature, skip};

#[test]
fn dmirror_example_runs() {
    require_feature!("test_hmm");
    if !std::path::Path::new("/dev/hmm_dmirror0").exists() {
        skip!("no /dev/hmm_dmirror0");
    }
    dmirror::main().expect("the dmirror example fails");
}

#[test]
fn udmabuf_example_runs() {
    require_feature!("udmabuf");
    if !std::path::Path::new("/dev/udmabuf").exists() {
        skip!("no /dev/udmabuf");
    }
    udmabuf::main().expect("the udmabuf example fails");
}

#[test]
fn register_example_runs() {
    require_feature!("test_hmm");
    if !std::path::Path::new("/dev/hmm_dmirror0").exists() {
        skip!("no /dev/hmm_dmirror0");
    }
    register::main().expect("the register example fails");
}
