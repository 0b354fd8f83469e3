//! Typed request and response headers, each read from and written to ext fields.
//!
//! Every header is declared once with the `header!` macro: field, Rust type and the exact
//! ext key Java uses (its field name). Required fields are plain types, optional ones
//! `Option<T>`; reading goes through [`ExtField`](super::ext::ExtField), so every header is as
//! lenient as `ext` (numbers, booleans and enums in every client form) and reports a missing or
//! unreadable field as a [`HeaderError`](super::ext::HeaderError). Keys a header does not name
//! (ACL keys, `ns`, `oway`, ...) are ignored on input.
//!
//! Files group headers by who uses them: `send`, `pull`, `offset`, `client`, `namesrv`,
//! `admin`; `enums` holds the enum-valued field types.

/// Declares a header struct with its [`CommandHeader`](super::ext::CommandHeader) impl.
macro_rules! header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $crate::remoting::ext::CommandHeader for $name {
            #[allow(unused_variables)]
            fn from_ext(
                ext: &$crate::remoting::ext::ExtFields,
            ) -> Result<Self, $crate::remoting::ext::HeaderError> {
                if let Some(raw) = ext.binary() {
                    // Undecoded binary ext bytes: one pass over them, no map built (the last
                    // of a repeated key wins, as in the map).
                    $( let mut $field: Option<&str> = None; )*
                    for (key, value) in $crate::remoting::binary_header::binary_fields(raw) {
                        match key {
                            $( $key => $field = Some(value), )*
                            _ => {}
                        }
                    }
                    return Ok($name {
                        $( $field: <$ty as $crate::remoting::ext::ExtField>::read_text(
                            $field,
                            $key,
                        )?, )*
                    });
                }
                // Fields are mostly declared in key order: one pass over the map.
                let mut lookup = ext.ordered_lookup();
                Ok($name {
                    $( $field: <$ty as $crate::remoting::ext::ExtField>::read_found(
                        lookup.get($key),
                        $key,
                    )?, )*
                })
            }

            #[allow(unused_mut)]
            fn to_ext(&self) -> $crate::remoting::ext::ExtFields {
                let mut ext = $crate::remoting::ext::ExtFields::with_capacity(
                    [$($key),*].len(),
                );
                $( $crate::remoting::ext::ExtField::write(&self.$field, &mut ext, $key); )*
                ext
            }

            #[allow(unused_mut)]
            fn into_ext(self) -> $crate::remoting::ext::ExtFields {
                let mut ext = $crate::remoting::ext::ExtFields::with_capacity(
                    [$($key),*].len(),
                );
                $( $crate::remoting::ext::ExtField::write_owned(self.$field, &mut ext, $key); )*
                ext
            }
        }
    };
}

pub mod admin;
pub mod client;
pub mod enums;
pub mod namesrv;
pub mod offset;
pub mod pull;
pub mod send;
pub mod transaction;

#[cfg(test)]
mod tests;
