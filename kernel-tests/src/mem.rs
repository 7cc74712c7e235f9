//! Test memory for the mirror-device tests ([`Region`], defined in the crate's `sys_call`
//! module with the unsafe code it needs), the fork helper [`in_child`], and memfd/dma-buf
//! fixtures.

pub use crate::sys_call::mem::{Access, Region, in_child, page};

/// A sealed memfd named `name` of `npages` pages, page `i` filled with byte `tag + i`.
pub fn tagged_memfd(name: &str, npages: usize, tag: u8) -> hmm::SealedMemfd {
    let m = hmm::SealedMemfd::new(name, (npages * page()) as u64).expect("memfd");
    for i in 0..npages {
        m.write_at(
            (i * page()) as u64,
            &vec![tag.wrapping_add(i as u8); page()],
        )
        .unwrap();
    }
    m
}

/// Every byte of a dma-buf, read through its mapping inside a CPU-access bracket.
pub fn dma_buf_bytes(buf: &drm_gem::DmaBuf) -> Vec<u8> {
    let map = buf.map().expect("mmap of the dma-buf");
    let _cpu = buf
        .begin_cpu_access(true, false)
        .expect("DMA_BUF_IOCTL_SYNC");
    let mut v = vec![0u8; map.len()];
    map.read_at(0, &mut v).unwrap();
    v
}
