pub mod message_id;
pub mod properties;
pub mod record;
