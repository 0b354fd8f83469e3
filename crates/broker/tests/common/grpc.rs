//! A gRPC v5 client of the in-process broker, built from ferromq's own generated code, and the
//! requests the gRPC tests share.

use ferromq_protocol::grpc::messaging_service_client::MessagingServiceClient;
use ferromq_protocol::grpc::{self as pb, Encoding, MessageType, Resource, SystemProperties};
use tonic::transport::{Channel, Endpoint};

use super::TIMEOUT;

/// A client of the broker's gRPC endpoint.
pub async fn grpc_client(broker: &ferromq_broker::Broker) -> MessagingServiceClient<Channel> {
    let addr = broker.grpc_addr().expect("gRPC endpoint on");
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        .connect()
        .await
        .expect("connect to the gRPC endpoint");
    MessagingServiceClient::new(channel)
}

/// `body` with the `x-mq-client-id` header.
pub fn with_client_id<T>(body: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(body);
    request
        .metadata_mut()
        .insert("x-mq-client-id", "test-client@1".parse().unwrap());
    request
}

/// A resource named `name`.
pub fn resource(name: &str) -> Option<Resource> {
    Some(Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

/// A message of `topic` with id `id`, IDENTITY-encoded, NORMAL unless `system` says.
pub fn message(topic: &str, id: &str, body: &[u8], system: SystemProperties) -> pb::Message {
    pb::Message {
        topic: resource(topic),
        user_properties: Default::default(),
        system_properties: Some(SystemProperties {
            message_id: id.into(),
            body_encoding: Encoding::Identity as i32,
            message_type: MessageType::Normal as i32,
            ..system
        }),
        body: body.to_vec(),
    }
}

/// SendMessage of `messages`; the reply.
pub async fn send(
    client: &mut MessagingServiceClient<Channel>,
    messages: Vec<pb::Message>,
) -> pb::SendMessageResponse {
    client
        .send_message(with_client_id(pb::SendMessageRequest { messages }))
        .await
        .expect("transport OK")
        .into_inner()
}
