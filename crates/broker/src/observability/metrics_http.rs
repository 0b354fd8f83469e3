//! The metrics endpoint: `GET /metrics` over HTTP/1.1, answered with the Prometheus text
//! format, one request per connection.
//!
//! A deliberately small responder (no HTTP framework: one route, no bodies in), hardened for
//! untrusted input:
//! - the request head is at most [`REQUEST_HEAD_MAX`] bytes (more: 431 and close) and must
//!   arrive within [`REQUEST_TIMEOUT`] (else the connection is closed without a reply);
//! - a head `httparse` cannot parse is 400 and close; a method other than GET or HEAD is 405;
//!   any path other than `/metrics` (query strings ignored) is 404;
//! - at most [`CONNECTIONS_MAX`] connections are served at once; beyond that new ones are
//!   closed at once, so a flood cannot grow memory;
//! - every reply carries `Connection: close` and the connection is closed after it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::context::BrokerContext;

/// Largest request head accepted.
pub const REQUEST_HEAD_MAX: usize = 8 * 1024;
/// Longest a client may take to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest writing a reply may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the rest of a refused request is read before closing.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Most bytes of a refused request read before closing.
const DRAIN_BYTES_MAX: usize = 64 * 1024;
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 32;
/// Headers parsed per request.
const HEADERS_MAX: usize = 64;

/// Content type of the Prometheus text format 0.0.4.
const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Serves the endpoint on `listener` until `stop` fires.
pub async fn serve(
    ctx: Arc<BrokerContext>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        tracing::debug!(%peer, "metrics connection refused: too many open");
                        continue;
                    };
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        answer(&ctx, stream, peer).await;
                        drop(permit);
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// GET (or HEAD, `head_only`) /metrics.
    Metrics { head_only: bool },
    /// A reply without a metrics body.
    Error { status: u16, reason: &'static str },
}

async fn answer(ctx: &BrokerContext, mut stream: TcpStream, peer: SocketAddr) {
    let route = match tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(route))) => route,
        Ok(Ok(None)) => return,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "metrics connection read failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "metrics request head not received in time");
            return;
        }
    };
    let is_error = matches!(route, Route::Error { .. });
    let reply = match route {
        Route::Metrics { head_only } => {
            let body = ctx.metrics.scrape(ctx).await;
            response(200, "OK", CONTENT_TYPE, &body, head_only)
        }
        Route::Error { status, reason } => {
            response(status, reason, "text/plain; charset=utf-8", reason, false)
        }
    };
    match tokio::time::timeout(WRITE_TIMEOUT, stream.write_all(&reply)).await {
        Ok(Ok(())) => {
            let _ = stream.shutdown().await;
            if is_error {
                // Closing with unread input would reset the connection and could destroy
                // the reply before the client reads it: read what is left, boundedly.
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain(&mut stream)).await;
            }
        }
        Ok(Err(error)) => tracing::debug!(%peer, %error, "metrics reply write failed"),
        Err(_) => tracing::debug!(%peer, "metrics reply write timed out"),
    }
}

/// Reads and drops the rest of a refused request, at most [`DRAIN_BYTES_MAX`] bytes.
async fn drain(stream: &mut TcpStream) {
    let mut chunk = [0u8; 4096];
    let mut total = 0;
    while total < DRAIN_BYTES_MAX {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => total += read,
        }
    }
}

/// Reads until the end of the request head; `None` when the peer closed before sending one.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Route>> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(if buffer.is_empty() {
                None
            } else {
                Some(bad_request())
            });
        }
        buffer.extend_from_slice(&chunk[..read]);
        match route_of(&buffer) {
            Some(route) => return Ok(Some(route)),
            None if buffer.len() >= REQUEST_HEAD_MAX => {
                return Ok(Some(Route::Error {
                    status: 431,
                    reason: "Request Header Fields Too Large",
                }))
            }
            None => {}
        }
    }
}

/// The route of a request head, or `None` while it is incomplete.
fn route_of(head: &[u8]) -> Option<Route> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Partial) => None,
        Err(_) => Some(bad_request()),
        Ok(httparse::Status::Complete(_)) => {
            let (Some(method), Some(path)) = (request.method, request.path) else {
                return Some(bad_request());
            };
            let path = path.split('?').next().unwrap_or_default();
            Some(match (method, path) {
                ("GET", "/metrics") => Route::Metrics { head_only: false },
                ("HEAD", "/metrics") => Route::Metrics { head_only: true },
                (_, "/metrics") => Route::Error {
                    status: 405,
                    reason: "Method Not Allowed",
                },
                _ => Route::Error {
                    status: 404,
                    reason: "Not Found",
                },
            })
        }
    }
}

fn bad_request() -> Route {
    Route::Error {
        status: 400,
        reason: "Bad Request",
    }
}

fn response(status: u16, reason: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_route_to_metrics_errors_or_wait_for_more() {
        let metrics = Route::Metrics { head_only: false };
        assert_eq!(
            route_of(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(metrics)
        );
        assert_eq!(
            route_of(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Route::Metrics { head_only: false })
        );
        assert_eq!(route_of(b"GET /metrics HTTP/1.1\r\nHost"), None);
        let status = |head: &[u8]| match route_of(head) {
            Some(Route::Error { status, .. }) => status,
            other => panic!("{other:?}"),
        };
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 404);
        assert_eq!(status(b"POST /metrics HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(status(b"\x00\x01garbage\r\n\r\n"), 400);
        assert_eq!(status(b"GET /metrics HTTP/9.9\r\n\r\n"), 400);
    }
}
