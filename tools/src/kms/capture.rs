//! `drmtool kms screenshot`: a PNG of what a CRTC shows, read from its framebuffer
//! (`GETFB2` and a map) or captured through a writeback connector, and the PNG writer.

use super::*;

/// How a screenshot is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Method {
    /// Writeback where it disturbs nothing: a writeback connector for the CRTC exists, DRM
    /// master can be had, and the commit that adds it beside the CRTC's outputs (a clone)
    /// passes `TEST_ONLY`. Otherwise GETFB2. Never detaches an output: where the kernel
    /// refuses vkms's clone (see [`screenshot`]'s writeback path) `auto` is GETFB2 there.
    Auto,
    /// A writeback connector captures what the CRTC composes, every plane included (vkms);
    /// needs DRM master. Beside the CRTC's outputs where the driver allows the clone, else
    /// instead of them for one frame (a swap), after which the routing is put back.
    Writeback,
    /// `GETFB2` of the CRTC's primary plane, then a map of its buffer (root or master).
    /// Shows the primary plane only: no cursor, no overlays.
    Getfb,
}

/// How `--method writeback` attached the writeback connector to the CRTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritebackWay {
    /// Beside the CRTC's outputs, which kept showing the frame.
    Clone,
    /// Instead of the CRTC's outputs for one frame: they were detached from the CRTC
    /// (its mode and planes kept) and put back afterwards.
    Swap,
}

impl WritebackWay {
    /// `clone` or `swap`, as the JSON says it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Clone => "clone",
            Self::Swap => "swap",
        }
    }
}

/// An RGB8 image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// RGB bytes, row by row.
    pub rgb: Vec<u8>,
    /// `writeback` or `getfb`.
    pub method: &'static str,
    /// For writeback: whether the capture cloned the CRTC's outputs or swapped them out.
    pub writeback: Option<WritebackWay>,
    /// For a swap: the names of the connectors detached from the CRTC for one frame.
    pub detached: Vec<String>,
}

fn crtc_by_spec(snap: &Snapshot, spec: &str) -> KmsResult<usize> {
    snap.crtcs
        .iter()
        .position(|c| c.id.get().to_string() == spec)
        .ok_or_else(|| KmsError::NotFound {
            what: "CRTC",
            name: spec.into(),
            place: "",
            have: snap
                .crtcs
                .iter()
                .map(|c| c.id.get().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Captures what CRTC `crtc` (its id) shows.
pub fn screenshot(dev: &Device, crtc: &str, method: Method) -> KmsResult<Image> {
    let _ = dev.set_client_cap(ClientCap::UniversalPlanes, 1);
    let atomic = dev.set_client_cap(ClientCap::Atomic, 1).is_ok();
    let wb = atomic
        && dev
            .set_client_cap(ClientCap::WritebackConnectors, 1)
            .is_ok();
    let snap = Snapshot::take(dev).map_err(drm("reading the KMS state"))?;
    let idx = crtc_by_spec(&snap, crtc)?;
    let c = &snap.crtcs[idx];
    let Some(mode) = c.mode else {
        return Err(KmsError::Cannot(format!(
            "CRTC {crtc} is off: it shows nothing (hint: `drmtool kms modeset CONNECTOR` lights one)"
        )));
    };
    let wb_conn = snap.connectors.iter().find(|k| {
        k.kind == WRITEBACK
            && k.connector
                .encoders
                .iter()
                .filter_map(|&e| dev.encoder(e).ok())
                .any(|e| e.possible_crtcs & (1 << idx) != 0)
    });
    match (method, wb_conn) {
        (Method::Writeback, None) => Err(KmsError::Cannot(format!(
            "no writeback connector for CRTC {crtc}{} (hint: --method getfb)",
            if wb {
                ""
            } else {
                ": the kernel refused DRM_CLIENT_CAP_WRITEBACK_CONNECTORS"
            }
        ))),
        (Method::Writeback, Some(k)) => match writeback(dev, &snap, idx, k, &mode, true)? {
            Wb::Done(img) => Ok(img),
            Wb::NotWithoutDisturbing(why) => Err(KmsError::Cannot(why)),
        },
        (Method::Auto, Some(k)) if wb => match writeback(dev, &snap, idx, k, &mode, false)? {
            Wb::Done(img) => Ok(img),
            Wb::NotWithoutDisturbing(_) => getfb(dev, &snap, idx, &mode),
        },
        (Method::Getfb | Method::Auto, _) => getfb(dev, &snap, idx, &mode),
    }
}

fn to_rgb(px: &[u8], format: u32, w: u32, h: u32, pitch: usize) -> KmsResult<Vec<u8>> {
    let mut rgb = Vec::with_capacity(w as usize * h as usize * 3);
    let argb = [DrmFourcc::Xrgb8888 as u32, DrmFourcc::Argb8888 as u32];
    let abgr = [DrmFourcc::Xbgr8888 as u32, DrmFourcc::Abgr8888 as u32];
    if !argb.contains(&format) && !abgr.contains(&format) {
        return Err(KmsError::Cannot(format!(
            "the framebuffer's format {} is not one drmtool converts (XR24, AR24, XB24, AB24)",
            drm_gem::kms::format_name(format)
        )));
    }
    for y in 0..h as usize {
        for x in 0..w as usize {
            let v = u32::from_le_bytes(px[y * pitch + x * 4..][..4].try_into().unwrap_or([0; 4]));
            let (r, g, b) = (
                ((v >> 16) & 0xff) as u8,
                ((v >> 8) & 0xff) as u8,
                (v & 0xff) as u8,
            );
            if argb.contains(&format) {
                rgb.extend_from_slice(&[r, g, b]);
            } else {
                rgb.extend_from_slice(&[b, g, r]);
            }
        }
    }
    Ok(rgb)
}

fn getfb(dev: &Device, snap: &Snapshot, idx: usize, mode: &Mode) -> KmsResult<Image> {
    let c = &snap.crtcs[idx];
    let fb_id = snap
        .planes
        .iter()
        .find(|p| p.kind == Some(drm_gem::kms::PlaneType::Primary) && p.crtc == Some(c.id))
        .and_then(|p| p.framebuffer)
        .or(c.framebuffer)
        .ok_or_else(|| KmsError::Cannot("the CRTC's primary plane shows no framebuffer".into()))?;
    let info = dev.framebuffer_info(fb_id).map_err(drm(format!(
        "DRM_IOCTL_MODE_GETFB2 on framebuffer {}",
        fb_id.get()
    )))?;
    let plane0 = info
        .planes
        .into_iter()
        .next()
        .ok_or_else(|| KmsError::Cannot("GETFB2 reported no planes".into()))?;
    let Some(mut obj) = plane0.object else {
        return Err(KmsError::Cannot(
            "GETFB2 withheld the buffer handle (hint: run as root, or as DRM master)".into(),
        ));
    };
    let (x0, y0) = c.position;
    let w = u32::from(mode.size().0).min(info.width.saturating_sub(x0));
    let h = u32::from(mode.size().1).min(info.height.saturating_sub(y0));
    let pitch = plane0.pitch as usize;
    let start = plane0.offset as usize + y0 as usize * pitch + x0 as usize * 4;
    let len = plane0.offset as usize + pitch * info.height as usize;
    let map = obj
        .map(len)
        .map_err(drm(format!("mapping framebuffer {}'s buffer", fb_id.get())))?;
    let mut px = vec![0u8; pitch * h as usize];
    let n = px.len().min(len - start);
    map.read_at(start, &mut px[..n])
        .map_err(drm("reading the framebuffer"))?;
    Ok(Image {
        width: w,
        height: h,
        rgb: to_rgb(&px, info.format, w, h, pitch)?,
        method: "getfb",
        writeback: None,
        detached: Vec::new(),
    })
}

/// What [`writeback`] got to.
enum Wb {
    /// The capture.
    Done(Image),
    /// Capturing would have meant detaching the CRTC's outputs, or master was refused,
    /// and the caller allows neither: why.
    NotWithoutDisturbing(String),
}

/// Puts a CRTC's routing back as it was before a writeback capture (the atomic commit
/// `undo`) when dropped, so that every error path after the capture commit restores it too.
/// Drop never panics: a failed restore is reported on stderr.
struct Routing<'d> {
    dev: &'d Device,
    undo: AtomicRequest<'static>,
    armed: bool,
}

impl Routing<'_> {
    /// Restores now and says whether the kernel took it.
    fn restore(mut self) -> drm_gem::Result<()> {
        self.armed = false;
        self.dev
            .atomic_commit(&self.undo, AtomicFlags::ALLOW_MODESET, 0)
            .map(|_| ())
    }
}

impl Drop for Routing<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(e) = self
            .dev
            .atomic_commit(&self.undo, AtomicFlags::ALLOW_MODESET, 0)
        {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "drmtool: putting the CRTC's outputs back after the writeback capture failed: {e} \
                 (hint: `drmtool kms modeset CONNECTOR` lights one again)"
            );
        }
    }
}

/// Captures CRTC `idx` through writeback connector `k`.
///
/// First the writeback connector goes beside the CRTC's other connectors (a clone), checked
/// with `TEST_ONLY`; the core counts any routing change as a modeset, so this commit, like
/// the swap, carries `ALLOW_MODESET`. Where the kernel refuses the clone and `may_swap`,
/// one commit swaps instead: the CRTC's other connectors off it (`CRTC_ID` 0) and the
/// writeback connector on it with its framebuffer and out-fence, the CRTC's mode and every
/// plane left as they are; once the fence signals (10 s at most) the previous routing is
/// put back exactly (a [`Routing`] guard, so also on every error path).
///
/// Why a kernel may refuse vkms's clone: its virtual encoder's `possible_clones` is 0x1 and
/// the writeback encoder's 0x2 (each only itself), so the CRTC's encoder mask 0x3 fails
/// `drm_atomic_check_valid_clones` in `drm_atomic_helper_check_modeset` with EINVAL (with
/// drm.debug bit 0x01 the kernel logs "crtcN failed valid clone check for mask 0x3";
/// `explain_atomic` can only name the writeback connector as the culprit object). That
/// check is 41b4b11da0215 ("drm: Add valid clones check", mainline 6.14), backported to
/// the stable 5.10.y, 5.15.y, 6.1.y and 6.12.y series (Debian's 5.10.262, 6.1.192 and
/// 6.12.117 have it); a kernel without it (5.15.0) takes the clone, and so does a vkms
/// that lists its encoders as cloneable. Which one a kernel is, the `TEST_ONLY` clone
/// says; nothing here keys on a version.
fn writeback(
    dev: &Device,
    snap: &Snapshot,
    idx: usize,
    k: &drm_gem::kms::ConnectorState,
    mode: &Mode,
    may_swap: bool,
) -> KmsResult<Wb> {
    let refuse = |why: String| {
        if may_swap {
            Err(KmsError::Cannot(why))
        } else {
            Ok(Wb::NotWithoutDisturbing(why))
        }
    };
    if let Err(err) = dev.set_master() {
        return refuse(format!(
            "writeback needs DRM master: {err} (hint: --method getfb while another program is master)"
        ));
    }
    let c = &snap.crtcs[idx];
    let crtc = u64::from(c.id.get());
    let (w, h) = (u32::from(mode.size().0), u32::from(mode.size().1));
    let format = match writeback_format(dev, k) {
        Ok(f) => f,
        Err(e) => return refuse(e.to_string()),
    };
    let mut buf = DumbBuffer::create(
        dev,
        DumbSpec {
            width: w,
            height: h,
            bpp: 32,
        },
    )
    .map_err(drm("creating the capture buffer"))?;
    let fb = dev
        .add_framebuffer(&FbSpec::for_dumb(&buf, format))
        .map_err(drm("adding the capture framebuffer"))?;
    let crtc_prop = writeback_prop(k, "CRTC_ID")?;
    let fb_prop = writeback_prop(k, "WRITEBACK_FB_ID")?;
    let fence_prop = writeback_prop(k, "WRITEBACK_OUT_FENCE_PTR")?;
    let flags = AtomicFlags::ALLOW_MODESET;
    let test = flags | AtomicFlags::TEST_ONLY;
    let mut clone = AtomicRequest::new();
    clone
        .set(k.id, crtc_prop, crtc)
        .set(k.id, fb_prop, fb.id())
        .writeback_fence(k.id, fence_prop);
    // The undo: the writeback connector back where it was, with no framebuffer.
    let mut undo = AtomicRequest::new();
    undo.set(k.id, crtc_prop, k.property("CRTC_ID").map_or(0, |p| p.raw))
        .set(k.id, fb_prop, 0);
    let mut detached = Vec::new();
    let (req, way) = match dev.atomic_commit(&clone, test, 0) {
        Ok(_) => (clone, WritebackWay::Clone),
        Err(clone_err) => {
            let outputs: Vec<_> = snap
                .connectors
                .iter()
                .filter(|x| x.id != k.id && x.property("CRTC_ID").map_or(0, |p| p.raw) == crtc)
                .collect();
            if !may_swap || outputs.is_empty() {
                return refuse(format!(
                    "the kernel refuses the writeback connector beside the CRTC's outputs: {clone_err} \
                     (hint: --method getfb)"
                ));
            }
            let mut swap = clone.clone();
            for x in outputs {
                let p = x
                    .property_id("CRTC_ID")
                    .map_err(drm("an output connector's CRTC_ID"))?;
                swap.set(x.id, p, 0);
                undo.set(x.id, p, crtc);
                detached.push(x.connector.name());
            }
            if let Err(err) = dev.atomic_commit(&swap, test, 0) {
                let why = dev
                    .explain_atomic(&swap, flags)
                    .ok()
                    .flatten()
                    .map(|x| format!(" ({})", explanation(&x)))
                    .unwrap_or_default();
                return Err(KmsError::Cannot(format!(
                    "the kernel refuses the writeback connector beside the CRTC's outputs \
                     ({clone_err}) and instead of them ({err}){why} (hint: --method getfb)"
                )));
            }
            (swap, WritebackWay::Swap)
        }
    };
    let done = dev
        .atomic_commit(&req, flags, 0)
        .map_err(drm("the writeback commit"))?;
    // From here on the routing is changed: the guard puts it back, also on errors.
    let routing = Routing {
        dev,
        undo,
        armed: true,
    };
    wait_writeback_fences(&done)?;
    routing
        .restore()
        .map_err(drm("putting the CRTC's outputs back after the capture"))?;
    let (px, pitch) = read_capture(&mut buf, h)?;
    remove_settled(dev, fb);
    Ok(Wb::Done(Image {
        width: w,
        height: h,
        rgb: to_rgb(&px, format as u32, w, h, pitch)?,
        method: "writeback",
        writeback: Some(way),
        detached,
    }))
}

/// The id of the writeback connector `k`'s property `name`.
fn writeback_prop(
    k: &drm_gem::kms::ConnectorState,
    name: &str,
) -> KmsResult<drm_gem::kms::PropertyId> {
    k.property_id(name)
        .map_err(drm(format!("the writeback connector's {name}")))
}

/// An atomic explanation in words: the kernel's error, and the properties or objects whose
/// removal alone makes the request pass.
fn explanation(x: &drm_gem::kms::Explanation) -> String {
    let mut named: Vec<String> = x
        .culprits
        .iter()
        .map(|c| {
            format!(
                "object {} {}={}",
                c.object,
                c.name.as_deref().unwrap_or("?"),
                c.value
            )
        })
        .collect();
    named.extend(x.culprit_objects.iter().map(|o| format!("object {o}")));
    if named.is_empty() {
        x.error.clone()
    } else {
        format!("{}; refused: {}", x.error, named.join(", "))
    }
}

/// A writeback connector that writes neither XR24 nor AR24: the formats it offers.
#[derive(Debug)]
struct NoCaptureFormat(Vec<u32>);

impl std::fmt::Display for NoCaptureFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .0
            .iter()
            .map(|&x| drm_gem::kms::format_name(x))
            .collect();
        write!(
            f,
            "the writeback connector writes none of XR24, AR24 (it offers: {}) (hint: \
             --method getfb)",
            names.join(", ")
        )
    }
}

/// The format a capture is written in: XR24 or AR24, whichever the writeback connector
/// `k` offers (vkms: XR24 on older kernels, AR24 on newer ones); else why not.
fn writeback_format(
    dev: &Device,
    k: &drm_gem::kms::ConnectorState,
) -> Result<DrmFourcc, NoCaptureFormat> {
    let formats: Vec<u32> = k
        .properties
        .iter()
        .find(|p| p.property.name == "WRITEBACK_PIXEL_FORMATS")
        .and_then(|p| match p.value {
            drm_gem::kms::PropertyValue::Blob(Some(id)) => dev.blob(id).ok(),
            _ => None,
        })
        .map(|b| {
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .unwrap_or_default();
    [DrmFourcc::Xrgb8888, DrmFourcc::Argb8888]
        .into_iter()
        .find(|&f| formats.contains(&(f as u32)))
        .ok_or(NoCaptureFormat(formats))
}

/// Waits (10 s at most each) for the writeback out-fences of a commit.
fn wait_writeback_fences(done: &drm_gem::kms::Committed) -> KmsResult<()> {
    for (_, _, f) in &done.fences {
        match f.wait(Some(Duration::from_secs(10))) {
            Ok(true) => {}
            Ok(false) => {
                return Err(KmsError::Cannot(
                    "the writeback fence did not signal within 10 s".into(),
                ));
            }
            Err(err) => return Err(drm("waiting for the writeback fence")(err)),
        }
    }
    Ok(())
}

/// The pixels of the capture buffer (`h` rows) and its pitch.
fn read_capture(buf: &mut DumbBuffer<&Device>, h: u32) -> KmsResult<(Vec<u8>, usize)> {
    let pitch = buf.pitch() as usize;
    let mut px = vec![0u8; pitch * h as usize];
    buf.map()
        .map_err(drm("mapping the capture"))?
        .read_at(0, &mut px)
        .map_err(drm("reading the capture"))?;
    Ok((px, pitch))
}

/// Removes the capture framebuffer and waits (2 s at most) until the kernel no longer knows
/// its id. The writeback job lets go of it from a kernel work item after the fence has
/// signalled; vkms's clean-up also switches its composer off (a flag, not a count), so a
/// capture committed before it ran could lose its frame: the next capture, ours or another
/// program's, starts clean.
fn remove_settled(dev: &Device, fb: drm_gem::kms::Framebuffer<&Device>) {
    let fb_id = fb.id();
    drop(fb);
    for _ in 0..100 {
        if dev.framebuffer_info(fb_id).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes `img` as an 8-bit RGB PNG, replacing `path` whole ([`crate::outfile::replace`]:
/// a symlink there is refused, an interrupted run leaves no truncated file).
///
/// # Errors
/// [`crate::outfile::OutfileError`] (the PNG encoder's errors as its `Write`).
pub fn write_png(img: &Image, path: &Path) -> Result<(), crate::outfile::OutfileError> {
    crate::outfile::replace(path, |f| encode_png(img, f))
}

fn encode_png(img: &Image, f: std::fs::File) -> std::io::Result<()> {
    let mut enc = png::Encoder::new(std::io::BufWriter::new(f), img.width, img.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(std::io::Error::other)?;
    w.write_image_data(&img.rgb)
        .map_err(std::io::Error::other)?;
    w.finish().map_err(std::io::Error::other)
}
