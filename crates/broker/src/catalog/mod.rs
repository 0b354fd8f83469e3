//! The broker's catalog: topic configs and subscription groups, each saved to its JSON file.

pub mod groups;
pub mod topics;
