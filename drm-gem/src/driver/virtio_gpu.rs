//! `virtio_gpu`: driver-specific objects (in progress).
