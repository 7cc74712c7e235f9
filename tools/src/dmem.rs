//! GPU memory limits through the kernel's device-memory cgroup controller (`dmem`, Linux
//! 6.14 and later): the regions drivers register (`drm/<device>/<region>`, for example
//! `drm/0000:03:00.0/vram0`), their capacity (`dmem.capacity`, root only), each cgroup's
//! charge (`dmem.current`, `dmem.peak`) and its limits (`dmem.max`, `dmem.low`,
//! `dmem.min`: nested-keyed files, one `region value` line per region, in bytes or `max`).
//! TTM charges a buffer to the cgroup of the process that allocates it and, at a cgroup's
//! `dmem.max`, evicts within that cgroup's subtree before it fails the allocation.
//!
//! What is here: the files' text ([`parse`], [`parse_size`]), the regions of a GPU
//! ([`Capacity::regions_of`]), a job's limits resolved against the GPUs it is given
//! ([`plan`]: fails closed where the kernel has no dmem or a GPU's driver registers no
//! region) and their application to a job's cgroup with every value read back
//! ([`apply`]).
//!
//! ```
//! use drmtool::dmem::{parse, parse_size, Value};
//! let text = "drm/0000:00:05.0/vram0 8388608\ndrm/vkms/stolen max\n";
//! let v = parse(text).unwrap();
//! assert_eq!(v[0], ("drm/0000:00:05.0/vram0".to_string(), Value::Bytes(8 << 20)));
//! assert_eq!(v[1].1, Value::Max);
//! assert_eq!(parse_size("8M").unwrap(), 8 << 20);
//! ```

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The controller's name in `cgroup.controllers` and `cgroup.subtree_control`.
pub const CONTROLLER: &str = "dmem";
/// The root cgroup's file of every registered region and its size in bytes.
pub const CAPACITY_FILE: &str = "dmem.capacity";
/// A cgroup's charge per region, in bytes.
pub const CURRENT_FILE: &str = "dmem.current";
/// The most a cgroup's charge per region ever was, in bytes.
pub const PEAK_FILE: &str = "dmem.peak";
/// The most of a dmem file read: far more than any number of regions a machine registers.
const MAX_READ: usize = 64 * 1024;
/// The longest region name taken from a file: `drm/` + a device name + `/` + a region.
const MAX_REGION: usize = 256;

/// A value of a dmem file: bytes, or `max` (no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// A number of bytes.
    Bytes(u64),
    /// `max`: unlimited.
    Max,
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bytes(b) => write!(f, "{b}"),
            Value::Max => f.write_str("max"),
        }
    }
}

/// A job's limit file: `dmem.max` (the most it may have charged), `dmem.low` (best-effort
/// protection from eviction by others) or `dmem.min` (hard protection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Knob {
    /// `dmem.max`.
    Max,
    /// `dmem.low`.
    Low,
    /// `dmem.min`.
    Min,
}

impl Knob {
    /// The file's name.
    pub fn file(self) -> &'static str {
        match self {
            Knob::Max => "dmem.max",
            Knob::Low => "dmem.low",
            Knob::Min => "dmem.min",
        }
    }

    /// The `drmtool run` flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Knob::Max => "--mem-max",
            Knob::Low => "--mem-low",
            Knob::Min => "--mem-min",
        }
    }
}

/// Why a dmem limit was not set, or a dmem file not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DmemError {
    /// A size that is not a number of bytes with an optional K, M, G or T (powers of 1024).
    #[error("{flag}: {text:?} is not a size (bytes, or a number with K, M, G or T: 8M, 4G)")]
    BadSize {
        /// The flag it came with.
        flag: &'static str,
        /// What was given.
        text: String,
    },
    /// A line of a dmem file that is not `region value`.
    #[error("{file}: line {line} is not `region value`")]
    BadLine {
        /// The file.
        file: String,
        /// 1-based.
        line: usize,
    },
    /// This kernel has no dmem controller (before 6.14, or built without
    /// CONFIG_CGROUP_DMEM): a limit cannot be enforced, so the job does not run.
    #[error(
        "this kernel has no dmem cgroup controller ({0}): {flag} cannot be enforced (Linux \
         6.14 or later with CONFIG_CGROUP_DMEM)",
        flag = "GPU memory limits"
    )]
    NoController(String),
    /// A chosen GPU whose driver registers no dmem region.
    #[error(
        "GPU {gpu} ({driver}): its driver registers no dmem region, so {flag} cannot be \
         enforced on it (regions here: {here})"
    )]
    NoRegion {
        /// The GPU (its device name).
        gpu: String,
        /// Its driver.
        driver: String,
        /// The flag.
        flag: &'static str,
        /// The regions the kernel has, or `none`.
        here: String,
    },
    /// A region named with `REGION=SIZE` that is not one of the job's GPUs' regions.
    #[error("{flag} {region}: not a dmem region of the job's GPUs (theirs: {theirs})")]
    NotTheJobs {
        /// The flag.
        flag: &'static str,
        /// The region given.
        region: String,
        /// The job's GPUs' regions, or `none`.
        theirs: String,
    },
    /// The kernel took the write but the file reads back another value (or no line for
    /// the region): the limit is not in force, so the job does not run.
    #[error(
        "{file} of the job's cgroup reads {got} for {region} after {want} was written: the \
         limit did not take, the job does not run"
    )]
    NotApplied {
        /// The file.
        file: &'static str,
        /// The region.
        region: String,
        /// What was written.
        want: Value,
        /// What reads back (`absent` when the region has no line).
        got: String,
    },
    /// A file operation failed.
    #[error("{what}: {errno}")]
    Io {
        /// The operation and path.
        what: String,
        /// The error.
        errno: rustix::io::Errno,
    },
}

fn io_err(what: String) -> impl FnOnce(rustix::io::Errno) -> DmemError {
    move |errno| DmemError::Io { what, errno }
}

/// A size as `drmtool run --mem-max` takes it: bytes, or a number with `K`, `M`, `G` or
/// `T` (powers of 1024, optionally followed by `iB` or `B`: `8M`, `8MiB`, `4G`).
///
/// # Errors
/// [`DmemError::BadSize`] (with an empty flag; [`plan`] names it).
pub fn parse_size(s: &str) -> Result<u64, DmemError> {
    let bad = || DmemError::BadSize {
        flag: "",
        text: s.to_string(),
    };
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad());
    }
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let shift = match t[digits..].to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// The lines of a dmem file (`region value`, value in bytes or `max`), in the file's order.
///
/// # Errors
/// [`DmemError::BadLine`] for a line of any other shape (the file is named `dmem`).
pub fn parse(text: &str) -> Result<Vec<(String, Value)>, DmemError> {
    parse_named(text, "dmem")
}

fn parse_named(text: &str, file: &str) -> Result<Vec<(String, Value)>, DmemError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || DmemError::BadLine {
            file: file.to_string(),
            line: i + 1,
        };
        let mut it = line.split_ascii_whitespace();
        let (Some(region), Some(v), None) = (it.next(), it.next(), it.next()) else {
            return Err(bad());
        };
        if region.len() > MAX_REGION || !region.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad());
        }
        let value = if v == "max" {
            Value::Max
        } else {
            Value::Bytes(v.parse().map_err(|_| bad())?)
        };
        out.push((region.to_string(), value));
    }
    Ok(out)
}

/// Reads a dmem file in `dir` (at most 64 KiB), parsed; `Ok(None)` when the file does not
/// exist (no dmem controller there).
///
/// # Errors
/// [`DmemError::Io`] or [`DmemError::BadLine`].
pub fn read_file(dir: &Path, name: &str) -> Result<Option<Vec<(String, Value)>>, DmemError> {
    let path = dir.join(name);
    let f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(format!("open {}", path.display()))(errno_of(&e))),
    };
    let text = read_bounded(f, &path)?;
    parse_named(&text, &path.display().to_string()).map(Some)
}

fn errno_of(e: &std::io::Error) -> rustix::io::Errno {
    rustix::io::Errno::from_io_error(e).unwrap_or(rustix::io::Errno::IO)
}

fn read_bounded(f: impl Read, path: &Path) -> Result<String, DmemError> {
    let mut buf = Vec::new();
    f.take(MAX_READ as u64)
        .read_to_end(&mut buf)
        .map_err(|e| io_err(format!("read {}", path.display()))(errno_of(&e)))?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The regions the kernel has and their sizes (`dmem.capacity` of the cgroup root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    /// `(region, bytes)`, in the kernel's order.
    pub regions: Vec<(String, u64)>,
}

impl Capacity {
    /// From the cgroup root `root`: `Ok(None)` where the kernel has no dmem controller.
    ///
    /// # Errors
    /// [`DmemError::Io`] or [`DmemError::BadLine`].
    pub fn read(root: &Path) -> Result<Option<Capacity>, DmemError> {
        Ok(read_file(root, CAPACITY_FILE)?.map(|lines| Capacity {
            regions: lines
                .into_iter()
                .map(|(r, v)| {
                    let bytes = match v {
                        Value::Bytes(b) => b,
                        Value::Max => u64::MAX,
                    };
                    (r, bytes)
                })
                .collect(),
        }))
    }

    /// The regions of the DRM device named `device` (its sysfs device name, which DRM
    /// uses as the region's middle part: `0000:00:05.0`, `vkms`).
    pub fn regions_of(&self, device: &str) -> Vec<&str> {
        self.regions
            .iter()
            .filter(|(r, _)| region_device(r) == Some(device))
            .map(|(r, _)| r.as_str())
            .collect()
    }

    /// The size of `region`, if the kernel has it.
    pub fn size_of(&self, region: &str) -> Option<u64> {
        self.regions
            .iter()
            .find(|(r, _)| r == region)
            .map(|&(_, b)| b)
    }
}

/// The device part of a DRM region's name (`drm/<device>/<region>`).
pub fn region_device(region: &str) -> Option<&str> {
    let rest = region.strip_prefix("drm/")?;
    let (dev, name) = rest.rsplit_once('/')?;
    (!dev.is_empty() && !name.is_empty()).then_some(dev)
}

/// One limit a job asks for: on every region of its GPUs (`--mem-max 8M`) or on one region
/// (`--mem-max drm/0000:00:05.0/vram0=8M`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRequest {
    /// The file.
    pub knob: Knob,
    /// One region, or `None` for every region of the job's GPUs.
    pub region: Option<String>,
    /// The value.
    pub value: Value,
}

impl LimitRequest {
    /// From a flag's argument: `SIZE`, `max`, `REGION=SIZE` or `REGION=max`.
    ///
    /// # Errors
    /// [`DmemError::BadSize`].
    pub fn parse(knob: Knob, arg: &str) -> Result<LimitRequest, DmemError> {
        let (region, size) = match arg.rsplit_once('=') {
            Some((r, s)) => (Some(r.to_string()), s),
            None => (None, arg),
        };
        let value = if size == "max" {
            Value::Max
        } else {
            Value::Bytes(parse_size(size).map_err(|_| DmemError::BadSize {
                flag: knob.flag(),
                text: arg.to_string(),
            })?)
        };
        Ok(LimitRequest {
            knob,
            region,
            value,
        })
    }
}

/// One setting [`apply`] writes: `value` for `region` in the job's `knob` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The file.
    pub knob: Knob,
    /// The region.
    pub region: String,
    /// The value.
    pub value: Value,
}

/// A GPU as [`plan`] needs it: its device name and driver.
#[derive(Debug, Clone, Copy)]
pub struct GpuRef<'a> {
    /// The sysfs device name (the region's middle part).
    pub device: &'a str,
    /// The driver, for the message when it has no region.
    pub driver: &'a str,
}

/// Resolves a job's limits against the kernel's regions and the job's GPUs: a request
/// without a region applies to every region of every GPU; one with a region must name a
/// region of the job's GPUs. A later request for the same file and region wins.
///
/// # Errors
/// [`DmemError::NoController`] (`cap` is `None`), [`DmemError::NoRegion`] (a GPU without
/// any region, for a request on all of them), [`DmemError::NotTheJobs`].
pub fn plan(
    reqs: &[LimitRequest],
    cap: Option<&Capacity>,
    gpus: &[GpuRef<'_>],
) -> Result<Vec<Setting>, DmemError> {
    if reqs.is_empty() {
        return Ok(Vec::new());
    }
    let Some(cap) = cap else {
        return Err(DmemError::NoController(format!(
            "no {CAPACITY_FILE} in the cgroup root"
        )));
    };
    let theirs: Vec<&str> = gpus.iter().flat_map(|g| cap.regions_of(g.device)).collect();
    let list = |v: &[&str]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out: Vec<Setting> = Vec::new();
    let mut push = |w: Setting| match out
        .iter_mut()
        .find(|o| o.knob == w.knob && o.region == w.region)
    {
        Some(o) => o.value = w.value,
        None => out.push(w),
    };
    for r in reqs {
        match &r.region {
            Some(region) => {
                if !theirs.contains(&region.as_str()) {
                    return Err(DmemError::NotTheJobs {
                        flag: r.knob.flag(),
                        region: region.clone(),
                        theirs: list(&theirs),
                    });
                }
                push(Setting {
                    knob: r.knob,
                    region: region.clone(),
                    value: r.value,
                });
            }
            None => {
                for g in gpus {
                    let regions = cap.regions_of(g.device);
                    if regions.is_empty() {
                        let all: Vec<&str> = cap.regions.iter().map(|(r, _)| r.as_str()).collect();
                        return Err(DmemError::NoRegion {
                            gpu: g.device.to_string(),
                            driver: g.driver.to_string(),
                            flag: r.knob.flag(),
                            here: list(&all),
                        });
                    }
                    for region in regions {
                        push(Setting {
                            knob: r.knob,
                            region: region.to_string(),
                            value: r.value,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Checks a file's text read back after `writes`: every region written there reads its
/// value.
///
/// # Errors
/// [`DmemError::NotApplied`] for the first that does not, [`DmemError::BadLine`].
pub fn check_readback(knob: Knob, writes: &[Setting], text: &str) -> Result<(), DmemError> {
    let lines = parse_named(text, knob.file())?;
    for w in writes.iter().filter(|w| w.knob == knob) {
        let got = lines.iter().find(|(r, _)| *r == w.region).map(|&(_, v)| v);
        if got != Some(w.value) {
            return Err(DmemError::NotApplied {
                file: knob.file(),
                region: w.region.clone(),
                want: w.value,
                got: got.map_or_else(|| "absent".into(), |v| v.to_string()),
            });
        }
    }
    Ok(())
}

/// A test's way to show the read-back check failing against a real kernel: what
/// [`apply_with`] writes differs from what it expects to read back by this many bytes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skew(pub u64);

/// Writes `writes` into the cgroup `job` (a directory fd), one line per write (the kernel
/// takes one region per write), then reads every file back and checks each value
/// ([`check_readback`]): a limit that did not take fails, and the caller runs nothing.
///
/// # Errors
/// [`DmemError::Io`] (no such file: the controller is not enabled for the job's cgroup),
/// [`DmemError::NotApplied`].
pub fn apply(job: BorrowedFd<'_>, job_path: &Path, writes: &[Setting]) -> Result<(), DmemError> {
    apply_with(job, job_path, writes, Skew::default())
}

/// [`apply`] with a [`Skew`] (tests only).
#[doc(hidden)]
pub fn apply_with(
    job: BorrowedFd<'_>,
    job_path: &Path,
    writes: &[Setting],
    skew: Skew,
) -> Result<(), DmemError> {
    for w in writes {
        let value = match w.value {
            Value::Bytes(b) => Value::Bytes(b.saturating_add(skew.0)),
            Value::Max => Value::Max,
        };
        let f = open_knob(job, job_path, w.knob, OFlags::WRONLY)?;
        let path = job_path.join(w.knob.file());
        let mut f = std::fs::File::from(f);
        f.write_all(format!("{} {value}\n", w.region).as_bytes())
            .map_err(|e| io_err(format!("write {}", path.display()))(errno_of(&e)))?;
    }
    let mut knobs: Vec<Knob> = writes.iter().map(|w| w.knob).collect();
    knobs.sort();
    knobs.dedup();
    for k in knobs {
        let f = open_knob(job, job_path, k, OFlags::RDONLY)?;
        let text = read_bounded(std::fs::File::from(f), &job_path.join(k.file()))?;
        check_readback(k, writes, &text)?;
    }
    Ok(())
}

/// Opens a knob file of the job's cgroup, never through a link.
fn open_knob(
    job: BorrowedFd<'_>,
    job_path: &Path,
    knob: Knob,
    mode: OFlags,
) -> Result<OwnedFd, DmemError> {
    rustix::fs::openat(
        job,
        knob.file(),
        mode | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err(format!(
        "open {}",
        job_path.join(knob.file()).display()
    )))
}

/// Turns the controller on for the children of `dir` (a cgroup directory fd) when it is
/// not yet: `+dmem` into its `cgroup.subtree_control`.
///
/// # Errors
/// [`DmemError::NoController`] when `dir`'s `cgroup.controllers` lacks dmem,
/// [`DmemError::Io`].
pub fn enable_for_children(dir: impl AsFd, path: &Path) -> Result<(), DmemError> {
    if enable_controller(dir, path, CONTROLLER)? {
        Ok(())
    } else {
        Err(DmemError::NoController(format!(
            "{} does not list it",
            path.join("cgroup.controllers").display()
        )))
    }
}

/// The text of the file `name` of the cgroup directory `dir` (at `path`), opened without
/// following links, at most 64 KiB.
///
/// # Errors
/// [`DmemError::Io`].
pub fn cgroup_read(dir: impl AsFd, path: &Path, name: &str) -> Result<String, DmemError> {
    let f = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err(format!("open {}", path.join(name).display())))?;
    read_bounded(std::fs::File::from(f), &path.join(name))
}

/// Writes `text` to the file `name` of the cgroup directory `dir` (at `path`) in one
/// write, opened without following links.
///
/// # Errors
/// [`DmemError::Io`].
pub fn cgroup_write(dir: impl AsFd, path: &Path, name: &str, text: &str) -> Result<(), DmemError> {
    let p = path.join(name);
    let f = rustix::fs::openat(
        &dir,
        name,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_err(format!("open {}", p.display())))?;
    std::fs::File::from(f)
        .write_all(text.as_bytes())
        .map_err(|e| io_err(format!("write {}", p.display()))(errno_of(&e)))
}

/// Turns the cgroup controller `name` on for the children of `dir` (a cgroup directory
/// fd, at `path`) when it is not yet (`+name` into its `cgroup.subtree_control`); `false`
/// when `dir`'s `cgroup.controllers` does not list it (nothing written). The files are
/// opened without following links, and read at most 64 KiB.
///
/// # Errors
/// [`DmemError::Io`]: a file could not be opened, read or written.
pub fn enable_controller(dir: impl AsFd, path: &Path, name: &str) -> Result<bool, DmemError> {
    let has = |text: &str| text.split_ascii_whitespace().any(|c| c == name);
    if has(&cgroup_read(&dir, path, "cgroup.subtree_control")?) {
        return Ok(true);
    }
    if !has(&cgroup_read(&dir, path, "cgroup.controllers")?) {
        return Ok(false);
    }
    cgroup_write(&dir, path, "cgroup.subtree_control", &format!("+{name}"))?;
    Ok(true)
}

/// One cgroup's use and limit of one region, as the kernel counts it (a cgroup's charge
/// includes its descendants').
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Charge {
    /// The cgroup, relative to the cgroup root (`/drmtool.slice/run-...`).
    pub cgroup: String,
    /// The region.
    pub region: String,
    /// `dmem.current`, bytes.
    pub current: u64,
    /// `dmem.max`: bytes, or `None` for no limit.
    pub max: Option<u64>,
}

/// How deep [`charges`] walks below the cgroup root.
const MAX_DEPTH: usize = 32;
/// How many cgroups [`charges`] reads at most.
const MAX_CGROUPS: usize = 16_384;

/// Every cgroup below `root` with a charge or a limit on some region: its `dmem.current`
/// and `dmem.max` (the kernel's view, hierarchical). Walks at most 32 levels and 16,384
/// cgroups, never through a link; a cgroup that disappears meanwhile is skipped. Empty
/// where the kernel has no dmem controller or no cgroup has it enabled.
///
/// # Errors
/// [`DmemError::Io`] when the root cannot be read.
pub fn charges(root: &Path) -> Result<Vec<Charge>, DmemError> {
    let mut out = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        seen += 1;
        if seen > MAX_CGROUPS {
            break;
        }
        if depth > 0 {
            charges_of(root, &dir, &mut out);
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if depth == 0 => {
                return Err(io_err(format!("read {}", dir.display()))(errno_of(&e)));
            }
            Err(_) => continue,
        };
        let mut subdirs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subdirs.sort();
        stack.extend(subdirs.into_iter().rev().map(|d| (d, depth + 1)));
    }
    Ok(out)
}

/// The charges of the cgroup `dir` (nothing when its files are gone or unreadable).
fn charges_of(root: &Path, dir: &Path, out: &mut Vec<Charge>) {
    let Ok(Some(current)) = read_file(dir, CURRENT_FILE) else {
        return;
    };
    let max = read_file(dir, Knob::Max.file())
        .ok()
        .flatten()
        .unwrap_or_default();
    let rel = dir
        .strip_prefix(root)
        .map(|r| format!("/{}", r.display()))
        .unwrap_or_else(|_| dir.display().to_string());
    out.extend(charge_rows(&rel, &current, &max));
}

/// The rows of one cgroup: each region with a charge or a limit.
pub fn charge_rows(
    cgroup: &str,
    current: &[(String, Value)],
    max: &[(String, Value)],
) -> Vec<Charge> {
    current
        .iter()
        .filter_map(|(region, cur)| {
            let cur = match cur {
                Value::Bytes(b) => *b,
                Value::Max => return None,
            };
            let max = match max.iter().find(|(r, _)| r == region).map(|&(_, v)| v) {
                Some(Value::Bytes(b)) => Some(b),
                _ => None,
            };
            (cur > 0 || max.is_some()).then(|| Charge {
                cgroup: cgroup.to_string(),
                region: region.clone(),
                current: cur,
                max,
            })
        })
        .collect()
}

/// Where cgroup v2 is mounted, whose root holds [`CAPACITY_FILE`].
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The cgroup root as a path (for [`Capacity::read`]).
pub fn root() -> PathBuf {
    PathBuf::from(CGROUP_ROOT)
}

#[cfg(test)]
mod tests;
