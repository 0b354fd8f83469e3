//! Generates the Rust code of ferromq's `apache.rocketmq.v2` protos (messages with prost, the
//! `MessagingService` server and client with tonic) into one file. Usage (scripts/gen-grpc):
//! `ferromq-grpc-gen <proto dir> <out dir>`; needs `protoc` on PATH or in `PROTOC`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let proto_dir = PathBuf::from(args.next().ok_or("usage: ferromq-grpc-gen <proto dir> <out dir>")?);
    let out_dir = PathBuf::from(args.next().ok_or("usage: ferromq-grpc-gen <proto dir> <out dir>")?);
    let files = [
        proto_dir.join("apache/rocketmq/v2/definition.proto"),
        proto_dir.join("apache/rocketmq/v2/service.proto"),
    ];
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The generated `connect` helper needs tonic's `transport` feature; callers build a
        // channel themselves, so the protocol crate needs only `codegen`.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(&out_dir)
        .compile_protos(&files, &[proto_dir])?;
    Ok(())
}
