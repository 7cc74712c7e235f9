//! `vm powercut`: cuts the guest's power again and again while a payload writes to
//! persistent memory, and checks after each reboot, on the same backing file, that nothing
//! acknowledged was lost (see `vm powercut --help` for the payload's protocol).

use crate::error::{Result, VmError};
use crate::guest::{
    self, BootOptions, BootResult, DeviceKind, Ending, GuestSpec, Payload, RunFiles, Stream,
};
use crate::prepare::{KernelSelection, Prepared, prepare};
use crate::wbcache::{CacheLayer, CacheStats};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `vm powercut` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowercutArgs {
    /// Power cuts (boots: cuts + 1).
    pub cuts: u32,
    /// Acknowledgements to wait for before each cut may come.
    pub min_acks: u64,
    /// Upper bound of the random delay after `min_acks`.
    pub max_delay: Duration,
    /// Seed of the random delays (default: from the clock).
    pub seed: Option<u64>,
    /// NVDIMM backing file to use and keep (default: a fresh one, removed at the end).
    pub nvdimm_file: Option<PathBuf>,
    /// `--cache`: `direct` or `volatile` ([`PmemCache`]).
    pub cache: String,
    /// Wall-clock limit per boot.
    pub timeout: Duration,
    /// Report losses but pass.
    pub allow_loss: bool,
}

/// `--cache` of `vm powercut`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmemCache {
    /// The NVDIMM: stores reach the backing file at once.
    Direct,
    /// virtio-pmem on [`crate::wbcache`]: only flushed data survives a cut.
    Volatile,
}

impl PmemCache {
    /// `direct` or `volatile`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "direct" => Some(Self::Direct),
            "volatile" => Some(Self::Volatile),
            _ => None,
        }
    }

    /// The guest's device, and the setup's name in messages.
    pub fn device(self) -> (DeviceKind, &'static str) {
        match self {
            PmemCache::Direct => (DeviceKind::Nvdimm, "nvdimm"),
            PmemCache::Volatile => (
                DeviceKind::VirtioPmem,
                "virtio-pmem on a volatile write-back cache (FUSE)",
            ),
        }
    }
}

/// How a `vm powercut` run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowercutOutcome {
    /// Nothing acknowledged was lost, or losses were allowed.
    Intact,
    /// Something acknowledged was lost.
    Lost,
    /// The payload refused its mode on this device (a `REFUSED ...` line).
    Refused,
    /// A boot ended otherwise than expected or the payload's check was missing (said on
    /// stderr; the round's files are kept).
    Broken,
}

impl PowercutOutcome {
    /// The exit status of `vm powercut`: 0, 1 on a loss, 3 on a refusal, 125 when the
    /// protocol broke.
    pub fn exit_status(self) -> u8 {
        match self {
            PowercutOutcome::Intact => 0,
            PowercutOutcome::Lost => 1,
            PowercutOutcome::Refused => 3,
            PowercutOutcome::Broken => 125,
        }
    }
}

/// The first `REFUSED ...` line of a payload's output: it refused its mode on this device.
pub fn parse_refused(out: &str) -> Option<&str> {
    out.lines().find(|l| l.starts_with("REFUSED "))
}

/// The `CHECK acked=<n> intact=<i> lost=<l>` line of a payload's output.
pub fn parse_check(out: &str) -> Option<(u64, u64, u64)> {
    let l = out.lines().find(|l| l.starts_with("CHECK "))?;
    let field = |k: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    Some((field("acked")?, field("intact")?, field("lost")?))
}

/// What the rounds of a run share.
struct Session<'a> {
    a: &'a PowercutArgs,
    prepared: Prepared,
    argv: Vec<String>,
    cache: PmemCache,
    device: DeviceKind,
    setup: &'static str,
    /// The backing file (the stable image behind the cache layer, with `volatile`).
    nvdimm: PathBuf,
    /// The run's own files (the NVDIMM unless the caller brought one, the cache's mount).
    scratch: RunFiles,
}

/// What the rounds found so far.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tally {
    acked_total: u64,
    lost_total: u64,
    /// Acknowledgements of the last round that was cut.
    prev_acks: u64,
    /// Records lost, per checked cut.
    losses: Vec<u64>,
}

impl Tally {
    /// Takes a round's check (of the round before) and its ending; returns the start of
    /// the round's line. A check of another number of records than was acknowledged is an
    /// error.
    fn record(
        &mut self,
        round: u32,
        check: Option<(u64, u64, u64)>,
        ending: &Ending,
    ) -> Result<String> {
        let mut line = format!("round {round:>2}:");
        if let Some((acked, intact, lost)) = check {
            if acked != self.prev_acks {
                return Err(VmError::new(format!(
                    "powercut round {round}: the payload checked {acked} records, {} were acknowledged",
                    self.prev_acks
                )));
            }
            self.acked_total += acked;
            self.lost_total += lost;
            self.losses.push(lost);
            line.push_str(&format!(
                " check of round {}: {intact}/{acked} intact, {lost} lost;",
                round - 1
            ));
        }
        if let Ending::PowerCut { acks } = ending {
            self.prev_acks = *acks;
            line.push_str(&format!(" cut after {acks} acks"));
        } else {
            line.push_str(" final boot");
        }
        Ok(line)
    }
}

/// Runs `vm powercut`: rounds 0..=cuts, each a boot of the payload on the same backing
/// file, all but the last cut short. Returns how it ended; an error is the harness's.
pub fn powercut(
    k: &KernelSelection,
    a: &PowercutArgs,
    env: &[String],
    mut argv: Vec<String>,
) -> Result<PowercutOutcome> {
    let prepared = prepare(k, env, &mut argv)?;
    let Some(cache) = PmemCache::parse(&a.cache) else {
        return Err(VmError::new(format!(
            "--cache {:?}: use direct or volatile",
            a.cache
        )));
    };
    let seed = a.seed.unwrap_or_else(clock_seed);
    let scratch = RunFiles::new(&std::env::temp_dir(), "vm-powercut")?;
    let nvdimm = backing_file(a.nvdimm_file.as_deref(), cache, &scratch)?;
    let (device, setup) = cache.device();
    let d = &prepared.decision;
    eprintln!(
        "vm: {} | kernel {} ({}) | powercut: {} cuts, >= {} acks then 0..{} ms, seed {seed}, {setup}, backing file {}{}",
        d.note,
        prepared.kernel.name,
        prepared.kernel.release,
        a.cuts,
        a.min_acks,
        a.max_delay.as_millis(),
        nvdimm.display(),
        d.detail_text()
    );
    let s = Session {
        a,
        prepared,
        argv,
        cache,
        device,
        setup,
        nvdimm,
        scratch,
    };
    s.rounds(seed)
}

/// A seed from the clock.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// The backing file: the caller's, or a fresh one in `scratch` (round 0 then starts from a
/// zeroed NVDIMM). The cache layer serves a stable file that must exist with the device's
/// size.
fn backing_file(given: Option<&Path>, cache: PmemCache, scratch: &RunFiles) -> Result<PathBuf> {
    let nvdimm = given.map_or_else(|| scratch.nvdimm.clone(), Path::to_path_buf);
    if given.is_none() {
        let _ = std::fs::remove_file(&nvdimm);
    }
    if cache == PmemCache::Volatile && !nvdimm.exists() {
        let made = std::fs::File::create(&nvdimm)
            .and_then(|f| f.set_len(u64::from(guest::NVDIMM_MIB) << 20));
        if let Err(e) = made {
            return Err(VmError::new(format!("{}: {e}", nvdimm.display())));
        }
    }
    Ok(nvdimm)
}

impl Session<'_> {
    /// Every round, then the run's line; removes the run's files unless a round broke.
    fn rounds(&self, seed: u64) -> Result<PowercutOutcome> {
        let mut rng = seed;
        let mut tally = Tally::default();
        for round in 0..=self.a.cuts {
            if let Some(end) = self.round(round, &mut rng, &mut tally)? {
                return Ok(end);
            }
        }
        println!(
            "powercut: {} cuts, {} records acknowledged, {} lost (per cut: {:?}), seed {seed}, {}",
            self.a.cuts, tally.acked_total, tally.lost_total, tally.losses, self.setup
        );
        // Holds the NVDIMM file unless the caller brought one (then it is empty).
        let _ = std::fs::remove_dir_all(&self.scratch.dir);
        Ok(if tally.lost_total == 0 || self.a.allow_loss {
            PowercutOutcome::Intact
        } else {
            PowercutOutcome::Lost
        })
    }

    /// One round: boots, judges the ending and the payload's check, prints the round's
    /// line. Returns the run's end where the round ends it.
    fn round(
        &self,
        round: u32,
        rng: &mut u64,
        tally: &mut Tally,
    ) -> Result<Option<PowercutOutcome>> {
        let last = round == self.a.cuts;
        let (spec, opts) = self.round_spec(round, last, tally.prev_acks, rng);
        let (r, stats) = self.boot(round, &spec, &opts)?;
        let out = String::from_utf8_lossy(&std::fs::read(&r.files.output).unwrap_or_default())
            .into_owned();
        let check = parse_check(&out);
        if let (Some(refused), Ending::Exited(_)) = (parse_refused(&out), &r.ending) {
            println!("round {round:>2}: {refused}");
            println!(
                "powercut: the payload refused its mode on {} (exit 3)",
                self.setup
            );
            let _ = std::fs::remove_dir_all(&r.files.dir);
            let _ = std::fs::remove_dir_all(&self.scratch.dir);
            return Ok(Some(PowercutOutcome::Refused));
        }
        if !expected_ending(&r.ending, last) || (round > 0 && check.is_none()) {
            broken(round, last, &r, &out);
            return Ok(Some(PowercutOutcome::Broken));
        }
        let mut line = tally.record(round, check, &r.ending)?;
        if let Some(st) = stats {
            line.push_str(&format!(
                "; cache: {} flushes, {} unflushed pages dropped",
                st.commits, st.dropped_pages
            ));
        }
        println!("{line}");
        let _ = std::fs::remove_dir_all(&r.files.dir);
        Ok(None)
    }

    /// The guest of a round (`POWERCUT_ROUND`, `POWERCUT_ACKED`, `POWERCUT_LAST` on the
    /// last) and its power cut (none on the last).
    fn round_spec(
        &self,
        round: u32,
        last: bool,
        prev_acks: u64,
        rng: &mut u64,
    ) -> (GuestSpec, BootOptions) {
        let p = &self.prepared;
        let spec = GuestSpec {
            kernel: p.kernel.clone(),
            devices: vec![self.device],
            payload: Payload {
                argv: self.argv.clone(),
                cwd: std::env::current_dir().unwrap_or_else(|_| "/".into()),
                env: round_env(&p.envs, round, prev_acks, last),
                host_root: true,
                writable_root: false,
            },
            accel: p.decision.accel,
            timeout: self.a.timeout,
            memory_mib: 1024,
            probe_only: false,
            stream_output: Stream::Off,
            cluster: None,
        };
        let opts = BootOptions {
            keep_nvdimm: true,
            power_cut: (!last).then(|| guest::PowerCut {
                after_acks: self.a.min_acks,
                max_delay: self.a.max_delay,
                seed: guest::xorshift(rng),
            }),
        };
        (spec, opts)
    }

    /// Boots a round (behind a fresh cache layer with `volatile`, cut when QEMU is dead).
    /// A boot that died before the payload started (a TCG timer-check panic on a loaded
    /// host was seen) touched nothing on the NVDIMM: it is retried once, visibly.
    fn boot(
        &self,
        round: u32,
        spec: &GuestSpec,
        opts: &BootOptions,
    ) -> Result<(BootResult, Option<CacheStats>)> {
        let mut attempt = 0;
        loop {
            let mut files = RunFiles::new(&std::env::temp_dir(), "vm-powercut-round")?;
            files.nvdimm = self.nvdimm.clone();
            let layer = match self.cache {
                PmemCache::Direct => None,
                PmemCache::Volatile => {
                    let l = CacheLayer::start(&self.nvdimm, &self.scratch.dir.join("wbcache"))?;
                    files.nvdimm = l.file();
                    Some(l)
                }
            };
            let r = guest::boot_with(spec, files, &self.prepared.busybox, opts);
            // QEMU is dead (killed or exited): the cut of the cache drops what it held.
            let stats = layer.map(CacheLayer::cut);
            let r = r?;
            if r.payload_time.is_none() && attempt == 0 {
                eprintln!(
                    "vm: powercut round {round}: the boot never reached the payload ({}); retrying once",
                    r.ending
                );
                let _ = std::fs::remove_dir_all(&r.files.dir);
                attempt += 1;
                continue;
            }
            return Ok((r, stats));
        }
    }
}

/// The payload's environment in `round`: the run's, then `POWERCUT_ROUND`,
/// `POWERCUT_ACKED` (the acknowledgements of the round before) and, on the last,
/// `POWERCUT_LAST=1`.
fn round_env(
    envs: &[(String, String)],
    round: u32,
    prev_acks: u64,
    last: bool,
) -> Vec<(String, String)> {
    let mut env = envs.to_vec();
    env.push(("POWERCUT_ROUND".into(), round.to_string()));
    env.push(("POWERCUT_ACKED".into(), prev_acks.to_string()));
    if last {
        env.push(("POWERCUT_LAST".into(), "1".into()));
    }
    env
}

/// Whether a round ended as it should: cut short, or (the last) exited 0.
fn expected_ending(ending: &Ending, last: bool) -> bool {
    matches!(
        (ending, last),
        (Ending::PowerCut { .. }, false) | (Ending::Exited(0), true)
    )
}

/// Says on stderr how round `round` broke the protocol: its ending, the payload's output
/// (without acknowledgements, 40 lines at most), the console's tail and the kept files.
fn broken(round: u32, last: bool, r: &BootResult, out: &str) {
    eprintln!(
        "vm: powercut round {round}: {} (expected {})",
        r.ending,
        if last { "exit 0" } else { "a power cut" }
    );
    for l in out.lines().filter(|l| !l.starts_with("ACK ")).take(40) {
        eprintln!("    > {l}");
    }
    for l in &r.console_tail {
        eprintln!("    | {l}");
    }
    eprintln!("vm: files kept in {}", r.files.dir.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powercut_reads_check_and_refused_lines() {
        let out = "mounted\nACK 0\nCHECK acked=5 intact=3 lost=2\nACK 1\n";
        assert_eq!(parse_check(out), Some((5, 3, 2)));
        assert_eq!(parse_check("CHECK acked=5 lost=2\n"), None);
        assert_eq!(parse_refused(out), None);
        let r = "READY\nREFUSED MAP_SYNC: EOPNOTSUPP\n";
        assert_eq!(parse_refused(r), Some("REFUSED MAP_SYNC: EOPNOTSUPP"));
        assert_eq!(PmemCache::parse("volatile"), Some(PmemCache::Volatile));
        assert_eq!(PmemCache::parse("direct"), Some(PmemCache::Direct));
        assert_eq!(PmemCache::parse("none"), None);
    }

    #[test]
    fn check_fields_come_in_any_order_and_must_be_numbers() {
        assert_eq!(
            parse_check("CHECK lost=0 acked=7 intact=7 extra=x\n"),
            Some((7, 7, 0))
        );
        assert_eq!(parse_check("CHECK acked=x intact=1 lost=0\n"), None);
        assert_eq!(parse_check(" CHECK acked=1 intact=1 lost=0\n"), None);
        // The first CHECK line counts.
        assert_eq!(
            parse_check("CHECK acked=1 intact=1 lost=0\nCHECK acked=2 intact=2 lost=0\n"),
            Some((1, 1, 0))
        );
        assert_eq!(parse_refused("REFUSED\nREFUSEDX\n"), None);
    }

    #[test]
    fn the_exit_status_says_how_the_run_ended() {
        let codes = [
            PowercutOutcome::Intact,
            PowercutOutcome::Lost,
            PowercutOutcome::Refused,
            PowercutOutcome::Broken,
        ]
        .map(PowercutOutcome::exit_status);
        assert_eq!(codes, [0, 1, 3, 125]);
        assert_eq!(PmemCache::Direct.device(), (DeviceKind::Nvdimm, "nvdimm"));
        assert_eq!(PmemCache::Volatile.device().0, DeviceKind::VirtioPmem);
    }

    #[test]
    fn the_tally_adds_up_the_checks_and_carries_the_acks() {
        let mut t = Tally::default();
        let cut = |acks| Ending::PowerCut { acks };
        assert_eq!(
            t.record(0, None, &cut(20)).unwrap(),
            "round  0: cut after 20 acks"
        );
        assert_eq!(
            t.record(1, Some((20, 18, 2)), &cut(31)).unwrap(),
            "round  1: check of round 0: 18/20 intact, 2 lost; cut after 31 acks"
        );
        assert_eq!(
            t.record(12, Some((31, 31, 0)), &Ending::Exited(0)).unwrap(),
            "round 12: check of round 11: 31/31 intact, 0 lost; final boot"
        );
        assert_eq!(
            t,
            Tally {
                acked_total: 51,
                lost_total: 2,
                prev_acks: 31,
                losses: vec![2, 0],
            }
        );
        let e = t.record(13, Some((30, 30, 0)), &cut(5)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "powercut round 13: the payload checked 30 records, 31 were acknowledged"
        );
        assert_eq!(t.prev_acks, 31);
    }

    #[test]
    fn each_round_tells_the_payload_where_it_is() {
        let base = vec![("A".to_string(), "1".to_string())];
        let pairs = |v: Vec<(String, String)>| {
            v.into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            pairs(round_env(&base, 3, 17, false)),
            "A=1 POWERCUT_ROUND=3 POWERCUT_ACKED=17"
        );
        assert_eq!(
            pairs(round_env(&base, 4, 9, true)),
            "A=1 POWERCUT_ROUND=4 POWERCUT_ACKED=9 POWERCUT_LAST=1"
        );
    }

    #[test]
    fn a_round_ends_in_a_cut_and_the_last_in_exit_0() {
        assert!(expected_ending(&Ending::PowerCut { acks: 3 }, false));
        assert!(!expected_ending(&Ending::PowerCut { acks: 3 }, true));
        assert!(expected_ending(&Ending::Exited(0), true));
        assert!(!expected_ending(&Ending::Exited(0), false));
        assert!(!expected_ending(&Ending::Exited(1), true));
        assert!(!expected_ending(&Ending::Timeout, false));
    }

    #[test]
    fn a_fresh_backing_file_is_made_only_for_the_cache_layer() {
        let scratch = RunFiles::new(&std::env::temp_dir(), "vm-powercut-test").unwrap();
        std::fs::write(&scratch.nvdimm, "old").unwrap();
        // direct: the scratch file is removed (QEMU makes a zeroed one).
        let p = backing_file(None, PmemCache::Direct, &scratch).unwrap();
        assert_eq!(p, scratch.nvdimm);
        assert!(!p.exists());
        // volatile: made with the device's size.
        let p = backing_file(None, PmemCache::Volatile, &scratch).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            u64::from(guest::NVDIMM_MIB) << 20
        );
        // The caller's file is used as it is.
        let mine = scratch.dir.join("mine");
        std::fs::write(&mine, "kept").unwrap();
        for cache in [PmemCache::Direct, PmemCache::Volatile] {
            assert_eq!(backing_file(Some(&mine), cache, &scratch).unwrap(), mine);
            assert_eq!(std::fs::read_to_string(&mine).unwrap(), "kept");
        }
        let missing = scratch.dir.join("no/such/dir");
        let e = backing_file(Some(&missing), PmemCache::Volatile, &scratch).unwrap_err();
        assert!(
            e.what.starts_with(&format!("{}: ", missing.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&scratch.dir).unwrap();
    }
}
