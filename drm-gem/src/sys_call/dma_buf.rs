//! Raw calls for `dma_buf` (see the module header of `sys_call` for the safety argument).
