//! `vgem`: driver-specific objects (in progress).
