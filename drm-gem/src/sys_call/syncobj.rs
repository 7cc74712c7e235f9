//! Raw calls for `syncobj` (see the module header of `sys_call` for the safety argument).
