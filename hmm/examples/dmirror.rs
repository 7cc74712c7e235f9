//! The test_hmm mirror device sees this process's memory: it reads and writes a buffer
//! through its own page tables, moves the pages into its memory, and the CPU still reads
//! the same bytes afterwards. Where there is no mirror device it says so and succeeds.

use hmm::{Dmirror, PageRange};

/// Runs the example (also called by `kernel-tests/tests/hmm_examples.rs` in the guests).
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let d = match Dmirror::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no mirror device here ({e}); nothing to show");
            return Ok(());
        }
    };
    println!("test_hmm request numbering: {:?}", d.layout());
    let page = hmm::dmirror::page_size();
    // Two whole pages of an ordinary heap buffer.
    let mut buf = vec![0u8; 3 * page];
    let off = buf.as_ptr().align_offset(page);
    let mem = &mut buf[off..off + 2 * page];
    mem.fill(7);
    let range = PageRange::of(mem)?;

    let mut seen = vec![0u8; 2 * page];
    let r = d.read(range, &mut seen)?;
    assert!(seen.iter().all(|&b| b == 7));
    println!("device read {} pages ({} fault rounds)", r.cpages, r.faults);

    let r = d.write_into(mem, &vec![9u8; 2 * page])?;
    assert!(mem.iter().all(|&b| b == 9));
    println!("device wrote {} pages", r.cpages);

    let r = d.migrate_to_device(range, &mut seen)?;
    println!(
        "migrated {} pages; the CPU page tables now show {:?}",
        r.cpages,
        d.snapshot(range)?
    );
    // The CPU's next access faults the pages back from the device.
    assert!(mem.iter().all(|&b| b == 9));
    println!("after the CPU touched them: {:?}", d.snapshot(range)?);
    Ok(())
}
