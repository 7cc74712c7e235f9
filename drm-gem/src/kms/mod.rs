//! Kernel modesetting. So far: framebuffers (`ADDFB2`, `RMFB`, `GETFB2`) with their GEM
//! handles owned through the device's handle table.

mod framebuffer;

pub use framebuffer::{FbPlane, FbPlaneInfo, FbSpec, Framebuffer, FramebufferId, FramebufferInfo};
