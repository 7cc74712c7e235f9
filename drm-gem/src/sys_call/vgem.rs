//! Raw calls for `vgem` (see the module header of `sys_call` for the safety argument).
