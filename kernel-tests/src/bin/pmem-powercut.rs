//! The guest half of the power-cut test (`vm powercut -- pmem-powercut --mode MODE`).
//!
//! Each boot (round r, from `POWERCUT_ROUND`) mounts the DAX ext4 on the NVDIMM (round 0
//! first makes the namespace fsdax and the filesystem), checks the records of round r-1
//! against the number the host saw acknowledged (`POWERCUT_ACKED`) and prints
//! `CHECK acked=<n> intact=<i> lost=<l>`, then (unless `POWERCUT_LAST`) creates a sparse
//! file `round-<r>` and writes numbered, checksummed 64-byte records into it, one per 4 KiB
//! page so that every record is a write fault into a hole (a block allocation: filesystem
//! metadata). After each record it prints `ACK <seq>` when the mode says the record is
//! durable. The host cuts the power at a random moment.
//!
//! Modes:
//! - `sync`: `DaxMapping::map_file` (MAP_SYNC), `persist` after each record. Nothing
//!   acknowledged may be lost.
//! - `msync`: plain MAP_SHARED, `persist` (which is `msync` there). Nothing may be lost.
//! - `sync-nopersist`: MAP_SYNC without `persist`. Under QEMU TCG stores reach the backing
//!   file at once and MAP_SYNC made the block allocation durable, so nothing is lost either;
//!   on real hardware with ADR the unflushed cache lines could be.
//! - `none`: plain MAP_SHARED, no persist: block allocations live in the ext4 journal until
//!   its next commit (every 5 s), so records acknowledged since the last commit are lost.
//!
//! On virtio-pmem (`vm powercut --cache volatile`, the write-back cache layer) the region is
//! not synchronous: MAP_SYNC is refused with EOPNOTSUPP, and `sync` / `sync-nopersist`
//! print `REFUSED MAP_SYNC ...` and exit 0 before any record (the harness exits 3). There
//! `msync` must lose nothing and `none` loses every record written since the last flush of
//! the device (ext4's journal commits flush it, every 5 s).

use hmm::DaxMapping;
use kernel_tests::pmem::{MNT, fsdax_mount, fsdax_remount};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const RECORD: usize = 64;
const STRIDE: usize = 4096;
const FILE_LEN: usize = 64 << 20;
const MAGIC: &[u8; 4] = b"PCUT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sync,
    Msync,
    SyncNoPersist,
    None,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Record `seq` of round `round`: magic, round, seq, 36 payload bytes, FNV-1a of the rest.
fn record(round: u32, seq: u64) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[..4].copy_from_slice(MAGIC);
    r[4..8].copy_from_slice(&round.to_le_bytes());
    r[8..16].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in r[16..56].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(7).wrapping_add(i as u8) ^ (round as u8);
    }
    let sum = fnv1a(&r[..56]);
    r[56..].copy_from_slice(&sum.to_le_bytes());
    r
}

fn env_u64(k: &str) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn file_of(round: u64) -> PathBuf {
    Path::new(MNT).join(format!("round-{round}"))
}

/// Checks the first `acked` records of round `round`: (intact, lost).
fn check(round: u64, acked: u64) -> Result<(u64, u64), String> {
    let mut f = std::fs::File::open(file_of(round)).map_err(|e| format!("round {round}: {e}"))?;
    let (mut intact, mut lost) = (0, 0);
    for seq in 0..acked {
        let mut buf = [0u8; RECORD];
        f.seek(SeekFrom::Start(seq * STRIDE as u64))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("round {round} record {seq}: {e}"))?;
        if buf == record(round as u32, seq) {
            intact += 1;
        } else {
            lost += 1;
        }
    }
    Ok((intact, lost))
}

fn run() -> Result<(), String> {
    let mode = match std::env::args()
        .skip_while(|a| a != "--mode")
        .nth(1)
        .as_deref()
    {
        Some("sync") => Mode::Sync,
        Some("msync") => Mode::Msync,
        Some("sync-nopersist") => Mode::SyncNoPersist,
        Some("none") => Mode::None,
        other => {
            return Err(format!(
                "--mode sync|msync|sync-nopersist|none, not {other:?}"
            ));
        }
    };
    let round = env_u64("POWERCUT_ROUND");
    let last = std::env::var_os("POWERCUT_LAST").is_some();
    let t0 = std::time::Instant::now();
    if round == 0 {
        fsdax_mount(true)?;
    } else {
        fsdax_remount()?;
        let acked = env_u64("POWERCUT_ACKED");
        let (intact, lost) = check(round - 1, acked)?;
        println!("CHECK acked={acked} intact={intact} lost={lost}");
        // One round's file at a time: 20 full ones would not fit on the NVDIMM (a write
        // fault that finds no free block is a SIGBUS).
        std::fs::remove_file(file_of(round - 1)).map_err(|e| e.to_string())?;
    }
    eprintln!("mounted in {:.2} s", t0.elapsed().as_secs_f64());
    if last {
        return Ok(());
    }
    let path = file_of(round);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.set_len(FILE_LEN as u64).map_err(|e| e.to_string())?;
    // The file and its size are durable before the first record: only the records' block
    // allocations are at stake.
    f.sync_all().map_err(|e| e.to_string())?;
    std::fs::File::open(MNT)
        .and_then(|d| d.sync_all())
        .map_err(|e| e.to_string())?;
    let mapped = match mode {
        Mode::Sync | Mode::SyncNoPersist => DaxMapping::map_file(&f, 0, FILE_LEN),
        Mode::Msync | Mode::None => DaxMapping::map_file_without_sync(&f, 0, FILE_LEN),
    };
    let mut m = match mapped {
        Ok(m) => m,
        // The file is on a mounted `-o dax` filesystem: the refusal means the DAX device is
        // not synchronous (virtio-pmem: durability needs its flush request, so MAP_SYNC
        // cannot promise it). Reported, not an error: the harness answers it with exit 3.
        Err(e) if hmm::is_not_dax(&e) => {
            println!(
                "REFUSED MAP_SYNC: {e}: the DAX device is not synchronous (virtio-pmem), \
                 mode {mode:?} cannot run here"
            );
            return Ok(());
        }
        Err(e) => return Err(e.to_string()),
    };
    println!("READY mode={mode:?}");
    let out = std::io::stdout();
    for seq in 0..(FILE_LEN / STRIDE) as u64 {
        let off = seq as usize * STRIDE;
        m.write_at(off, &record(round as u32, seq))
            .map_err(|e| e.to_string())?;
        if matches!(mode, Mode::Sync | Mode::Msync) {
            m.persist(off, RECORD).map_err(|e| e.to_string())?;
        }
        // Only now is the record acknowledged.
        let mut o = out.lock();
        writeln!(o, "ACK {seq}")
            .and_then(|_| o.flush())
            .map_err(|e| e.to_string())?;
    }
    println!("FULL: all records written, waiting for the power cut");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("pmem-powercut: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_carry_their_identity_and_checksum() {
        let a = record(3, 17);
        assert_eq!(&a[..4], MAGIC);
        assert_ne!(a, record(3, 18));
        assert_ne!(a, record(4, 17));
        let mut torn = a;
        torn[20] ^= 1;
        assert_ne!(fnv1a(&torn[..56]).to_le_bytes(), torn[56..]);
    }
}
