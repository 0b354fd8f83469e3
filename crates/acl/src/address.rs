//! Remote-address allow lists (`whiteRemoteAddress`, `globalWhiteRemoteAddresses`), in the
//! forms RocketMQ accepts for IPv4: `*` (everyone), an exact address `192.168.0.1`, and
//! per-octet patterns where each octet is a number, `*`, a range `1-200`, or (last octet)
//! a set `{1,2,3}`. A blank entry allows nobody. Anything else makes the file invalid.

use std::net::IpAddr;

use crate::AccountsError;

/// One allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPattern {
    /// `*`: every address.
    All,
    /// An exact address (IPv4 or IPv6).
    Exact(IpAddr),
    /// Four IPv4 octet patterns.
    Octets([OctetPattern; 4]),
}

/// One octet of an IPv4 pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OctetPattern {
    /// `*`.
    Any,
    /// `a-b`, inclusive.
    Range(u8, u8),
    /// `{a,b,c}`.
    Set(Vec<u8>),
}

impl OctetPattern {
    fn matches(&self, octet: u8) -> bool {
        match self {
            OctetPattern::Any => true,
            OctetPattern::Range(low, high) => (*low..=*high).contains(&octet),
            OctetPattern::Set(values) => values.contains(&octet),
        }
    }
}

/// Most values a `{a,b,...}` set may list (there are only 256 octets).
const OCTET_SET_MAX: usize = 256;

impl AddressPattern {
    /// Parses one entry; `Ok(None)` for a blank one.
    pub fn parse(text: &str) -> Result<Option<AddressPattern>, AccountsError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        if text == "*" || text == "*.*.*.*" {
            return Ok(Some(AddressPattern::All));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Some(AddressPattern::Exact(ip)));
        }
        let bad = || {
            AccountsError::Invalid(format!(
                "remote address pattern {text:?} is not *, an IP address, or four octets \
                 each a number, *, a range a-b or (last) a set {{a,b}}"
            ))
        };
        let parts: Vec<&str> = text.split('.').collect();
        if parts.len() != 4 {
            return Err(bad());
        }
        let mut octets = Vec::with_capacity(4);
        for (index, part) in parts.iter().enumerate() {
            octets.push(parse_octet(part, index == 3).ok_or_else(bad)?);
        }
        let octets: [OctetPattern; 4] = octets.try_into().map_err(|_| bad())?;
        Ok(Some(AddressPattern::Octets(octets)))
    }

    /// Whether `ip` is allowed by this entry.
    pub fn matches(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (AddressPattern::All, _) => true,
            (AddressPattern::Exact(allowed), ip) => *allowed == ip,
            (AddressPattern::Octets(patterns), IpAddr::V4(v4)) => patterns
                .iter()
                .zip(v4.octets())
                .all(|(pattern, octet)| pattern.matches(octet)),
            (AddressPattern::Octets(_), IpAddr::V6(_)) => false,
        }
    }
}

fn parse_octet(text: &str, last: bool) -> Option<OctetPattern> {
    if text == "*" {
        return Some(OctetPattern::Any);
    }
    if let Some(inner) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        if !last {
            return None;
        }
        let values: Option<Vec<u8>> = inner.split(',').map(|v| v.trim().parse().ok()).collect();
        return values
            .filter(|v| !v.is_empty() && v.len() <= OCTET_SET_MAX)
            .map(OctetPattern::Set);
    }
    if let Some((low, high)) = text.split_once('-') {
        let (low, high): (u8, u8) = (low.parse().ok()?, high.parse().ok()?);
        return (low <= high).then_some(OctetPattern::Range(low, high));
    }
    let value: u8 = text.parse().ok()?;
    Some(OctetPattern::Range(value, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn patterns_match_as_rocketmq_documents() {
        let all = AddressPattern::parse("*").unwrap().unwrap();
        assert!(all.matches(ip("10.1.2.3")));
        let exact = AddressPattern::parse("127.0.0.1").unwrap().unwrap();
        assert!(exact.matches(ip("127.0.0.1")) && !exact.matches(ip("127.0.0.2")));
        let wild = AddressPattern::parse("192.168.*.1-10").unwrap().unwrap();
        assert!(wild.matches(ip("192.168.7.10")));
        assert!(!wild.matches(ip("192.168.7.11")));
        assert!(!wild.matches(ip("192.169.7.1")));
        let set = AddressPattern::parse("10.0.0.{1,3}").unwrap().unwrap();
        assert!(set.matches(ip("10.0.0.3")) && !set.matches(ip("10.0.0.2")));
        assert_eq!(AddressPattern::parse("  ").unwrap(), None);
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in [
            "10.0.0",
            "10.0.0.300",
            "10.{1,2}.0.1",
            "10.0.0.9-1",
            "a.b.c.d",
        ] {
            assert!(AddressPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
