//! Helpers shared by the name server's integration tests.

#[path = "../../../../test-support/certificate.rs"]
mod certificate;
#[allow(unused_imports)] // not every test file of the crate uses it
pub use certificate::certificate;
