//! Raw calls for `virtio_gpu` (see the module header of `sys_call` for the safety argument).
