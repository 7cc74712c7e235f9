//! `qxl`: driver-specific objects (in progress).
