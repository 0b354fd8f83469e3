//! Helpers shared by the broker's integration tests: the Prometheus endpoint scraped over
//! real TCP and parsed.

#![allow(dead_code)] // Each test file uses part of these helpers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on one exchange with the metrics endpoint.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends raw bytes to the endpoint and returns everything it answers before closing.
pub async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect to metrics");
        stream.write_all(request).await.expect("write request");
        stream.shutdown().await.expect("half-close");
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.expect("read reply");
        String::from_utf8(reply).expect("UTF-8 reply")
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .expect("the endpoint answers and closes within 5 s")
}

/// One parsed sample line: metric name and labels.
pub type Series = (String, BTreeMap<String, String>);

/// GET /metrics, parsed: every sample line as (name, labels) -> value.
pub async fn scrape(addr: SocketAddr) -> BTreeMap<Series, f64> {
    let reply = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await;
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    parse(body)
}

/// Parses the Prometheus text format: `name{k="v",...} value` lines; `#` lines skipped.
pub fn parse(body: &str) -> BTreeMap<Series, f64> {
    let mut out = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample and a value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                let labels = inner
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (key, quoted) = pair.split_once('=').expect("label=value");
                        let value = quoted.trim_matches('"');
                        (key.to_string(), value.to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        assert!(
            out.insert((name, labels), value).is_none(),
            "duplicate series: {line}"
        );
    }
    out
}

/// The value of `name` with exactly `labels`, 0 when the series is absent.
pub fn value(metrics: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    metrics
        .get(&(name.to_string(), labels))
        .copied()
        .unwrap_or(0.0)
}
