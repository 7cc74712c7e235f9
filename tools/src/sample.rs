//! The sample client (`drm-sample-client`): a process that holds known GPU memory, for
//! demonstrating and testing `drmtool buffers`. Not part of the library's API (hidden from
//! its documentation): its flags and output change with the tests that use it.
//!
//! It opens one DRM node, creates the dumb buffers it is asked for, optionally maps them,
//! flinks one, exports one as a dma-buf (and maps that), or takes a dma-buf or a DRM fd
//! from another process (`pidfd_getfd`, which needs ptrace access to it) and imports it.
//! Then it prints one JSON line ([`Ready`]) and waits until its stdin closes.

use clap::Parser;
use drm_gem::{Device, DmaBuf, DumbBuffer, DumbSpec, PrimeFlags};
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::process::ExitCode;

/// Command line of the sample client.
#[derive(Parser, Debug, Clone, Default)]
#[command(
    name = "drm-sample-client",
    about = "Hold known DRM buffers until stdin closes (for drmtool buffers)",
    after_help = "Example:\n  drm-sample-client --device vgem --dumb 64x64 --map --export </dev/tty"
)]
pub struct Args {
    /// Node path (`/dev/dri/card1`) or driver name (`vgem`, `vkms`).
    #[arg(long)]
    pub device: String,
    /// A dumb buffer to create, `WxH` (32 bpp) or `WxHxBPP`; repeatable.
    #[arg(long = "dumb", value_parser = parse_dumb)]
    pub dumb: Vec<DumbSpec>,
    /// Map every dumb buffer.
    #[arg(long)]
    pub map: bool,
    /// flink the first buffer (it then shows in debugfs `gem_names`).
    #[arg(long)]
    pub flink: bool,
    /// Export the first buffer as a dma-buf and keep the fd.
    #[arg(long)]
    pub export: bool,
    /// Map the exported or imported dma-buf.
    #[arg(long)]
    pub map_dmabuf: bool,
    /// Take dma-buf fd FD of process PID (`PID:FD`), import it into the device.
    #[arg(long, value_parser = parse_pid_fd)]
    pub import: Option<(u32, u32)>,
    /// Take DRM fd FD of process PID (`PID:FD`): the same open file in two processes.
    #[arg(long, value_parser = parse_pid_fd)]
    pub share_drm: Option<(u32, u32)>,
    /// Duplicate its own DRM fd once (two fds, one open file).
    #[arg(long)]
    pub dup: bool,
    /// Fork a child that inherits the DRM file (on an fd without close-on-exec) and holds it
    /// until stdin closes: one open file in two processes, as any fork leaves it.
    #[arg(long)]
    pub fork: bool,
    /// Light the first connected output with a pattern framebuffer of this file (DRM master,
    /// atomic or legacy as `drmtool kms modeset`) while it holds; the previous state comes
    /// back when stdin closes. What composes or scans out that framebuffer is this file's
    /// work (vkms composes it for CRC capture and writeback).
    #[arg(long)]
    pub light: bool,
}

/// A `--dumb`, `--import`/`--steal` or `--device` value the client refused.
#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("bad number {0:?} in {1:?}")]
    Number(String, String),
    #[error("expected WxH or WxHxBPP, got {0:?}")]
    DumbShape(String),
    #[error("expected PID:FD")]
    PidFdShape,
    #[error("bad {0} {1:?}")]
    Bad(&'static str, String),
    #[error("no node of driver {0:?}; hint: `drmtool devices` lists them")]
    NoNode(String),
    #[error("{0}")]
    NoDevices(String),
}

fn parse_dumb(s: &str) -> Result<DumbSpec, ArgError> {
    let p: Vec<&str> = s.split('x').collect();
    let n = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| ArgError::Number(t.into(), s.into()))
    };
    match p.as_slice() {
        [w, h] => Ok(DumbSpec {
            width: n(w)?,
            height: n(h)?,
            bpp: 32,
        }),
        [w, h, b] => Ok(DumbSpec {
            width: n(w)?,
            height: n(h)?,
            bpp: n(b)?,
        }),
        _ => Err(ArgError::DumbShape(s.into())),
    }
}

fn parse_pid_fd(s: &str) -> Result<(u32, u32), ArgError> {
    let (p, f) = s.split_once(':').ok_or(ArgError::PidFdShape)?;
    Ok((
        p.parse().map_err(|_| ArgError::Bad("pid", p.into()))?,
        f.parse().map_err(|_| ArgError::Bad("fd", f.into()))?,
    ))
}

/// One buffer the client holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeldBuffer {
    /// GEM handle.
    pub handle: u32,
    /// Size in bytes as the kernel chose.
    pub size: u64,
    /// Fake mmap offset.
    pub offset: u64,
    /// Whether it is mapped.
    pub mapped: bool,
}

/// What the client printed once it held everything.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ready {
    /// Its pid.
    pub pid: u32,
    /// The node it opened.
    pub node: String,
    /// The DRM fd.
    pub drm_fd: u32,
    /// A second fd on the same open file (`--dup`), or the one taken by `--share-drm`.
    pub extra_drm_fds: Vec<u32>,
    /// Dumb buffers.
    pub buffers: Vec<HeldBuffer>,
    /// flink name of the first buffer.
    pub flink: Option<u32>,
    /// The exported or imported dma-buf fd.
    pub dmabuf_fd: Option<u32>,
    /// Its inode.
    pub dmabuf_inode: Option<u64>,
    /// Its size.
    pub dmabuf_size: Option<u64>,
    /// Whether it is mapped.
    pub dmabuf_mapped: bool,
    /// The child `--fork` started: its pid and the fd on which it holds the DRM file.
    #[serde(default)]
    pub fork_child: Option<(u32, u32)>,
    /// What `--light` lit: connector name and CRTC id.
    #[serde(default)]
    pub lit: Option<(String, u32)>,
}

fn fail(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("drm-sample-client: {what}: {e}");
    ExitCode::FAILURE
}

fn node_path(spec: &str) -> Result<String, ArgError> {
    if spec.starts_with('/') {
        return Ok(spec.to_string());
    }
    let nodes = drm_gem::enumerate()
        .map_err(|e| ArgError::NoDevices(crate::gpu::no_devices_message(&e).to_string()))?;
    let pick = |kind| {
        nodes
            .iter()
            .find(|n| n.driver.as_deref() == Some(spec) && n.kind == kind)
    };
    pick(drm_gem::NodeKind::Primary)
        .or_else(|| pick(drm_gem::NodeKind::Render))
        .map(|n| n.path.display().to_string())
        .ok_or_else(|| ArgError::NoNode(spec.into()))
}

fn take_fd(pid: u32, fd: u32) -> std::io::Result<OwnedFd> {
    let p = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(-1))
        .ok_or_else(|| std::io::Error::other("bad pid"))?;
    let pidfd = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())?;
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("bad fd"))?;
    Ok(rustix::process::pidfd_getfd(
        &pidfd,
        fd,
        rustix::process::PidfdGetfdFlags::empty(),
    )?)
}

fn raw(fd: impl AsFd) -> u32 {
    u32::try_from(fd.as_fd().as_raw_fd()).unwrap_or(u32::MAX)
}

/// Runs the client with `args` (including the program name); returns its exit status.
pub fn main_with(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    run(&args, &mut std::io::stdout(), &mut std::io::stdin())
}

/// A step of [`run`] that failed: what it was, and why (printed by [`fail`]).
struct Failed(String, String);

/// `r`, or the step `what` failed with its error.
fn step<T, E: std::fmt::Display>(r: Result<T, E>, what: impl Into<String>) -> Result<T, Failed> {
    r.map_err(|e| Failed(what.into(), e.to_string()))
}

/// The step `what` failed because of `why` (no error value).
fn refused<T>(what: &str, why: &str) -> Result<T, Failed> {
    Err(Failed(what.into(), why.into()))
}

/// Holds what `args` asks for, writes the [`Ready`] line to `out`, and returns when `wait`
/// reaches end of file.
pub fn run(args: &Args, out: &mut dyn Write, wait: &mut dyn Read) -> ExitCode {
    match hold_all(args, out, wait) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(Failed(what, why)) => fail(&what, why),
    }
}

/// The node of `--device`, the DRM file on it, and the extra fds on that file (`--dup`,
/// `--share-drm`).
fn open_drm(args: &Args) -> Result<(String, Device, Vec<OwnedFd>), Failed> {
    let node = step(node_path(&args.device), "cannot pick a node")?;
    let dev = step(Device::open(&node), format!("cannot open {node}"))?;
    let mut extra: Vec<OwnedFd> = Vec::new();
    if args.dup {
        extra.push(step(rustix::io::fcntl_dupfd_cloexec(&dev, 0), "dup")?);
    }
    if let Some((pid, fd)) = args.share_drm {
        extra.push(step(take_fd(pid, fd), format!("pidfd_getfd({pid}:{fd})"))?);
    }
    Ok((node, dev, extra))
}

/// The `--dumb` buffers, and what the [`Ready`] line says of each (`--map`: their offsets).
fn dumb_buffers<'d>(
    args: &Args,
    dev: &'d Device,
) -> Result<(Vec<DumbBuffer<&'d Device>>, Vec<HeldBuffer>), Failed> {
    let mut bufs = Vec::new();
    for s in &args.dumb {
        let what = format!("dumb buffer {}x{}", s.width, s.height);
        bufs.push(step(DumbBuffer::create(dev, *s), what)?);
    }
    let mut held = Vec::new();
    for b in &bufs {
        let offset = if args.map {
            step(b.map_offset(), "MAP_DUMB")?
        } else {
            0
        };
        held.push(HeldBuffer {
            handle: b.handle().get(),
            size: b.size(),
            offset,
            mapped: args.map,
        });
    }
    Ok((bufs, held))
}

/// What the first buffer is shared as: its flink name (`--flink`), and the dma-buf exported
/// (`--export`) or imported from another process (`--import`, with the GEM object the import
/// made).
type Shared<'d> = (
    Option<u32>,
    Option<DmaBuf>,
    Option<drm_gem::GemObject<&'d Device>>,
);

/// [`Shared`] of `bufs` on `dev` as `args` asks.
fn share<'d>(
    args: &Args,
    dev: &'d Device,
    bufs: &[DumbBuffer<&'d Device>],
) -> Result<Shared<'d>, Failed> {
    let flink = if args.flink {
        match bufs.first() {
            Some(b) => Some(step(b.gem().flink(), "flink")?.get()),
            None => return refused("flink", "no buffer to name (add --dumb)"),
        }
    } else {
        None
    };
    let mut dmabuf: Option<DmaBuf> = None;
    if args.export {
        match bufs.first() {
            Some(b) => {
                dmabuf = Some(step(
                    dev.export(b.gem(), PrimeFlags::default()),
                    "PRIME export",
                )?)
            }
            None => return refused("export", "no buffer to export (add --dumb)"),
        }
    }
    let mut imported = None;
    if let Some((pid, fd)) = args.import {
        let fd = step(take_fd(pid, fd), format!("pidfd_getfd({pid}:{fd})"))?;
        let d = DmaBuf::from_fd(fd);
        imported = Some(step(dev.import(d.as_fd()), "PRIME import")?);
        dmabuf = Some(d);
    }
    Ok((flink, dmabuf, imported))
}

/// Writes `ready` to `out` and holds everything until `wait` ends; false when the line
/// could not be written.
fn hold(ready: &Ready, out: &mut dyn Write, wait: &mut dyn Read) -> bool {
    let line = serde_json::to_string(ready).unwrap_or_default();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        return false;
    }
    // Hold everything until stdin closes. A signal (EINTR) is not the end of stdin: a
    // client under a signal storm must keep what it holds.
    let mut sink = [0u8; 64];
    loop {
        match wait.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    true
}

/// [`hold`], with the first connected output lit by a pattern framebuffer meanwhile.
fn hold_lit(
    dev: &Device,
    ready: &mut Ready,
    out: &mut dyn Write,
    wait: &mut dyn Read,
) -> Result<bool, Failed> {
    let first = drm_gem::kms::Snapshot::take(dev).and_then(|s| s.first_output(dev));
    let conn = match step(first, "light: reading the KMS state")? {
        Some(o) => o.connector.get().to_string(),
        None => return refused("light", "no connected output with a mode"),
    };
    let mut ok = false;
    let lit = crate::kms::modeset(dev, &conn, None, &mut |lit| {
        ready.lit = Some((lit.connector.clone(), lit.crtc));
        ok = hold(ready, out, wait);
    });
    step(lit, "light")?;
    Ok(ok)
}

/// [`run`]'s work: everything held, the [`Ready`] line written; whether it was.
fn hold_all(args: &Args, out: &mut dyn Write, wait: &mut dyn Read) -> Result<bool, Failed> {
    let (node, dev, extra) = open_drm(args)?;
    let (mut bufs, held) = dumb_buffers(args, &dev)?;
    let (flink, dmabuf, imported) = share(args, &dev, &bufs)?;
    let (dmabuf_fd, dmabuf_inode, dmabuf_size) = match &dmabuf {
        Some(d) => {
            let ino = rustix::fs::fstat(d).map(|s| s.st_ino).ok();
            (Some(raw(d)), ino, d.size().ok())
        }
        None => (None, None, None),
    };
    // Mappings borrow their buffers; keep both alive until stdin closes.
    let mut maps = Vec::new();
    if args.map {
        for b in &mut bufs {
            maps.push(step(b.map(), "mmap of a dumb buffer")?);
        }
    }
    let dmabuf_map = match (args.map_dmabuf, &dmabuf) {
        (false, _) => None,
        (true, Some(d)) => Some(step(d.map(), "mmap of the dma-buf")?),
        (true, None) => return refused("map-dmabuf", "no dma-buf (add --export or --import)"),
    };
    let child = if args.fork {
        Some(step(fork_holder(&dev, &node), "fork")?)
    } else {
        None
    };
    let mut ready = Ready {
        lit: None,
        fork_child: child.as_ref().map(|(c, fd)| (c.id(), *fd)),
        pid: std::process::id(),
        node: node.clone(),
        drm_fd: raw(&dev),
        extra_drm_fds: extra.iter().map(raw).collect(),
        buffers: held,
        flink,
        dmabuf_fd,
        dmabuf_inode,
        dmabuf_size,
        dmabuf_mapped: dmabuf_map.is_some(),
    };
    let held_ok = if args.light {
        hold_lit(&dev, &mut ready, out, wait)?
    } else {
        hold(&ready, out, wait)
    };
    if !held_ok {
        return Ok(false);
    }
    drop(dmabuf_map);
    drop(maps);
    drop(imported);
    if let Some((mut c, _)) = child {
        // The child reads the same stdin: it has seen its end too.
        let _ = c.wait();
    }
    Ok(true)
}

/// Forks a child (`cat`, reading this process's stdin to its end) that inherits the DRM file
/// `dev` on an fd without close-on-exec; returns it and that fd's number. The parent's copy
/// of that fd is closed again, so the parent keeps exactly the fds it had.
fn fork_holder(dev: &Device, node: &str) -> std::io::Result<(std::process::Child, u32)> {
    let keep = rustix::io::fcntl_dupfd_cloexec(dev, 3)?;
    rustix::io::fcntl_setfd(&keep, rustix::io::FdFlags::empty())?;
    let fd = raw(&keep);
    let child = std::process::Command::new("cat")
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| std::io::Error::other(format!("cat holding {node}: {e}")))?;
    drop(keep);
    Ok((child, fd))
}

/// Deterministic GPU workloads with a known count of kernel events, for tracing tests and
/// benchmarks (`drmtool trace`): what each does is exactly what the tracepoints must show.
pub mod workload {
    use drm_gem::{Device, DumbBuffer, DumbSpec, Error, NodeKind, Result};
    use std::time::Duration;

    fn not_found(what: &str) -> Error {
        Error::NotFound { what: what.into() }
    }

    /// `n` vgem fences, each attached (write) to one dumb buffer and signalled at once: `n`
    /// `dma_fence_init` and `n` `dma_fence_signaled`, driver `vgem`, each fence on a fresh
    /// context (timeline `unbound`), seqno 1.
    ///
    /// # Errors
    /// No vgem node, or an ioctl's error.
    pub fn vgem_fences(n: u64) -> Result<()> {
        use drm_gem::driver::vgem::{Vgem, VgemFenceAccess};
        let dev = Device::open_driver("vgem", Some(NodeKind::Primary))?;
        let spec = DumbSpec {
            width: 64,
            height: 64,
            bpp: 32,
        };
        let buf = DumbBuffer::create(&dev, spec)?;
        let vgem = Vgem::new(&dev)?;
        for _ in 0..n {
            vgem.attach_fence(buf.handle(), VgemFenceAccess::Write)?
                .signal()?;
        }
        Ok(())
    }

    /// `n` fences on one new sw_sync timeline at values 1..=n, then the timeline advanced by
    /// one `n` times, `gap` apart: `n` `dma_fence_init` and `n` `dma_fence_signaled`, driver
    /// `sw_sync`, all on one context, seqnos 1..=n signalled in that order, each signal at
    /// least `gap` after the one before.
    ///
    /// # Errors
    /// No sw_sync (CONFIG_SW_SYNC, debugfs mounted), or an ioctl's error.
    pub fn sw_sync_timeline(n: u32, gap: Duration) -> Result<()> {
        let timeline = drm_gem::SwSyncTimeline::open()?;
        let fences = (1..=n)
            .map(|v| timeline.create_fence(v, "drmtool-workload"))
            .collect::<Result<Vec<_>>>()?;
        for _ in 0..n {
            std::thread::sleep(gap);
            timeline.inc(1)?;
        }
        drop(fences);
        Ok(())
    }

    /// `n` rounds of (create a fence on one sw_sync timeline, signal it, close it), no
    /// sleep: `n` each of `dma_fence_init`, `dma_fence_signaled` and `dma_fence_destroy`,
    /// driver `sw_sync`, one context, seqnos 1..=n; never more than one fence open, so any
    /// `n` fits under the fd limit.
    ///
    /// # Errors
    /// No sw_sync (CONFIG_SW_SYNC, debugfs mounted), or an ioctl's error.
    pub fn sw_sync_churn(n: u32) -> Result<()> {
        let timeline = drm_gem::SwSyncTimeline::open()?;
        for v in 1..=n {
            let f = timeline.create_fence(v, "drmtool-churn")?;
            timeline.inc(1)?;
            drop(f);
        }
        Ok(())
    }

    /// `n` virtio-gpu EXECBUFFERs (an empty virgl command stream) with out-fences, each
    /// waited for: `n` `dma_fence_emit` and `n` `dma_fence_signaled`, driver `virtio_gpu`,
    /// on the device's fence context, seqnos consecutive and rising, signalled in order.
    /// The driver numbers a fence when it emits it: every `dma_fence_init` has seqno 0.
    ///
    /// # Errors
    /// No virtio-gpu render node, no virgl (EXECBUFFER refused), an ioctl's error, or a
    /// fence that does not signal within 10 s.
    pub fn virtio_execbuffers(n: u64) -> Result<()> {
        use drm_gem::driver::virtio_gpu::{Submit, VirtioGpu};
        let dev = Device::open_driver("virtio_gpu", Some(NodeKind::Render))?;
        let gpu = VirtioGpu::new(&dev)?;
        for i in 0..n {
            let fence = gpu
                .submit(&Submit {
                    command: &[],
                    out_fence: true,
                    ..Default::default()
                })?
                .ok_or_else(|| not_found(&format!("the out-fence of submission {i}")))?;
            if !fence.wait(Some(Duration::from_secs(10)))? {
                return Err(not_found(&format!(
                    "the signal of submission {i}'s out-fence within 10 s"
                )));
            }
        }
        Ok(())
    }

    /// `n` legacy page flips with events on vkms's first CRTC (lit first with SETCRTC at
    /// 1024x768, as master), each waited for: `n` `drm_vblank_event_delivered` for this
    /// file, sequences rising.
    ///
    /// # Errors
    /// No vkms node, no virtual connector or 1024x768 mode, not master, an ioctl's error,
    /// or a flip whose event does not come within 10 s.
    pub fn vkms_flips(n: u64) -> Result<()> {
        use drm_gem::kms::{Event, FbSpec, Snapshot};
        let dev = Device::open_driver("vkms", Some(NodeKind::Primary))?;
        dev.set_master()?;
        let snap = Snapshot::take(&dev)?;
        let crtc = *snap
            .resources
            .crtcs
            .first()
            .ok_or_else(|| not_found("a vkms CRTC"))?;
        let conn = snap
            .connectors
            .iter()
            .find(|c| c.connector.kind == ioctl_sys::drm::DRM_MODE_CONNECTOR_VIRTUAL)
            .ok_or_else(|| not_found("vkms's virtual connector"))?
            .connector
            .id;
        let mode = *dev
            .probe_connector(conn)?
            .modes
            .iter()
            .find(|m| m.size() == (1024, 768))
            .ok_or_else(|| not_found("a 1024x768 mode"))?;
        let spec = DumbSpec {
            width: 1024,
            height: 768,
            bpp: 32,
        };
        let bufs = [
            DumbBuffer::create(&dev, spec)?,
            DumbBuffer::create(&dev, spec)?,
        ];
        let mut fbs = Vec::new();
        for b in &bufs {
            fbs.push(dev.add_framebuffer(&FbSpec::single(
                1024,
                768,
                drm_gem::DrmFourcc::Xrgb8888,
                b.handle(),
                b.pitch(),
            ))?);
        }
        dev.set_crtc(crtc, fbs[0].id(), (0, 0), &[conn], &mode)?;
        for i in 0..n {
            dev.page_flip(crtc, fbs[((i + 1) % 2) as usize].id(), Some(i))?;
            loop {
                let evs = dev.read_events(Some(Duration::from_secs(10)))?;
                if evs.is_empty() {
                    return Err(not_found(&format!("the event of flip {i} within 10 s")));
                }
                if evs
                    .iter()
                    .any(|e| matches!(e, Event::FlipComplete(v) if v.user_data == i))
                {
                    break;
                }
            }
        }
        Ok(())
    }
}
