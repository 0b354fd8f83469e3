//! placeholder
pub mod clock;
pub mod disk;
pub mod log;
pub mod net;
pub mod rng;
pub mod swarm;
pub mod trace;
