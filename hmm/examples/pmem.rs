//! Lists the persistent-memory regions and namespaces of this machine; given a file on a
//! DAX filesystem (`mount -o dax`), appends a record through a MAP_SYNC mapping and makes
//! it durable with `persist`.
//!
//! ```text
//! cargo run -p hmm --example pmem
//! cargo run -p hmm --example pmem -- /mnt/pmem/log
//! ```

use hmm::{DaxMapping, PmemRegion};
use std::path::Path;

/// The example, callable from tests (`kernel-tests/tests/pmem_example.rs`).
pub fn run(file: Option<&Path>) -> Result<(), Box<dyn std::error::Error>> {
    let regions = PmemRegion::discover()?;
    if regions.is_empty() {
        println!("no persistent memory on this machine (no /sys/bus/nd regions)");
    }
    for r in &regions {
        println!(
            "{}: {} MiB, persistence domain {:?}",
            r.name,
            r.size >> 20,
            r.persistence_domain.as_deref().unwrap_or("")
        );
        for n in &r.namespaces {
            println!(
                "  {} {:<6} {} MiB usable, align {:?}, block {:?}, dax {:?}",
                n.name,
                n.mode.ndctl_name(),
                n.size >> 20,
                n.align,
                n.block_device,
                n.dax_device
            );
        }
    }
    let Some(path) = file else { return Ok(()) };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if f.metadata()?.len() < 4096 {
        f.set_len(4096)?;
    }
    let mut m = match DaxMapping::map_file(&f, 0, 4096) {
        Ok(m) => m,
        Err(e) if hmm::is_not_dax(&e) => {
            return Err(format!("{} is not on a DAX filesystem: {e}", path.display()).into());
        }
        Err(e) => return Err(e.into()),
    };
    let record = b"hello, persistent world\n";
    m.write_at(0, record)?;
    let how = m.persist(0, record.len())?;
    println!(
        "wrote {} bytes to {}, durable by {how:?}",
        record.len(),
        path.display()
    );
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args_os().nth(1);
    run(arg.as_deref().map(Path::new))
}
