//! Raw calls for `qxl` (see the module header of `sys_call` for the safety argument).
