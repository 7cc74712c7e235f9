//! `bochs`: driver-specific objects (in progress).
