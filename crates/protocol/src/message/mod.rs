pub mod message_id;
pub mod outline;
pub mod properties;
pub mod record;
