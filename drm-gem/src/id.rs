//! The one definition of the crate's non-zero id and handle newtypes.

/// Declares `pub struct $name(NonZeroU32)`: `Copy`, ordered, hashable, `Debug` as
/// `Name(7)`, with `new(raw) -> Option<Self>` (`None` for 0, which the kernel never hands
/// out) and `get()`; serialised as the bare number with the `serde` feature.
macro_rules! nonzero_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[repr(transparent)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(core::num::NonZeroU32);

        impl $name {
            /// Wraps a raw value; `None` for 0.
            pub const fn new(raw: u32) -> Option<Self> {
                match core::num::NonZeroU32::new(raw) {
                    Some(v) => Some(Self(v)),
                    None => None,
                }
            }

            /// The raw value.
            pub const fn get(self) -> u32 {
                self.0.get()
            }
        }
    };
}

pub(crate) use nonzero_id;
