//! Named counters: the enums through which each stage names what it
//! counts (its slow-path events; the drop reasons), and the glue that lets
//! a composite stage show its parts' counters side by side.
//!
//! VPP's model: every node owns its counter enum and their names; the
//! runtime aggregates them by name. A stage here counts into an array
//! indexed by its own enum ([`crate::counter_enum!`]); a mode built of stages
//! ([`crate::gateway`]) lays its parts' arrays one after another under
//! names joined by [`fn@concat`]; the appliance sizes its counters from
//! [`crate::fwd::ForwardMode::EVENTS`] and reports them by those names.
//!
//! A leaf: it imports nothing from the crate.

/// Defines a counter enum: variants numbered from 0 in order, each with
/// the name reports use, and `ALL`, `COUNT`, `NAMES` and `name()`.
///
/// ```
/// pipeline::counter_enum! {
///     /// What a stage counts.
///     pub enum Event {
///         /// Packets answered.
///         Answered = "answered",
///         /// Packets refused.
///         Refused = "refused",
///     }
/// }
/// assert_eq!(Event::COUNT, 2);
/// assert_eq!(Event::Refused.name(), "refused");
/// assert_eq!(Event::NAMES, &["answered", "refused"]);
/// ```
#[macro_export]
macro_rules! counter_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $var:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $var, )+
        }

        impl $name {
            /// Every variant, in counter order.
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// Number of variants (the size of a counter array).
            pub const COUNT: usize = Self::ALL.len();
            /// Names in reports, in counter order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// Name in reports.
            pub fn name(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }
    };
}

/// The names of several stages' counters laid one after another (`N`
/// must be their total; a mismatch fails the build where it is used in a
/// constant).
pub const fn concat<const N: usize>(parts: &[&[&'static str]]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut k = 0;
    let mut i = 0;
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(k == N, "concat: N is not the total of the parts");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    counter_enum! {
        /// A test enum.
        enum Three {
            /// a
            A = "a",
            /// b
            B = "b",
            /// c
            C = "c",
        }
    }

    #[test]
    fn enums_number_and_name_their_variants() {
        assert_eq!(Three::COUNT, 3);
        assert_eq!(Three::C as usize, 2);
        assert_eq!(Three::ALL, &[Three::A, Three::B, Three::C]);
        assert_eq!(Three::B.name(), "b");
        let counts = [0u64; Three::COUNT];
        assert_eq!(counts.len(), 3);
    }

    #[test]
    fn concat_lays_parts_end_to_end() {
        const ALL: [&str; 4] = concat(&[&["x"], Three::NAMES]);
        assert_eq!(ALL, ["x", "a", "b", "c"]);
    }
}
