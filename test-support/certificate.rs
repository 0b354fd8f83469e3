//! A self-signed TLS certificate for tests, shared by the crates' `tests/common` modules
//! (each includes this file with `#[path]`; they need `rcgen` as a dev-dependency).

/// Writes a self-signed certificate for 127.0.0.1 (rcgen) and its key into `dir` as
/// `server.pem` and `server.key`; returns (cert, key) paths.
pub fn certificate(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .expect("rcgen makes a certificate");
    let cert = dir.join("server.pem");
    let key = dir.join("server.key");
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
    (cert, key)
}
