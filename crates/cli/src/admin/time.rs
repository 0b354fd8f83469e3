//! Time arguments of `ferromq admin` (`-s`, `--since`, `--begin`, `--end`) and time columns.
//!
//! Accepted forms: `now`; epoch milliseconds (`1767225600000`); mqadmin's
//! `yyyy-MM-dd#HH:mm:ss:SSS` in the **local time zone**, as mqadmin reads it; and ferromq's
//! relative forms `-<n><unit>` with unit `ms`, `s`, `m`, `h` or `d` (`-1h`, `-30m`, `-10s`),
//! meaning that long before now. Times are printed in the local time zone too. The local
//! zone is the one `TZ` names (`TZ=UTC` for scripts and tests), else the system's.

use anyhow::Result;
use chrono::{Local, NaiveDate, NaiveDateTime, TimeZone};

pub use crate::record::now_ms;

/// Parses a time argument into epoch milliseconds; `now_ms` anchors `now` and relative forms.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64> {
    parse_time_in(text, now_ms, &Local)
}

/// [`parse_time`] with dates read in `zone`.
pub fn parse_time_in<Z: TimeZone>(text: &str, now_ms: i64, zone: &Z) -> Result<i64> {
    let text = text.trim();
    let bad = || {
        anyhow::anyhow!(
            "bad time format {text:?}: expected now, epoch milliseconds, yyyy-MM-dd#HH:mm:ss:SSS \
             or a relative time like -1h, -30m, -10s"
        )
    };
    if text.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<i64>().map_err(|_| bad());
    }
    if let Some(relative) = text.strip_prefix('-') {
        let split = relative
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(bad)?;
        let (number, unit) = relative.split_at(split);
        let amount: i64 = number.parse().map_err(|_| bad())?;
        let unit_ms = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        return amount
            .checked_mul(unit_ms)
            .map(|delta| now_ms - delta)
            .ok_or_else(bad);
    }
    let naive = parse_datetime(text).ok_or_else(bad)?;
    zone.from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| anyhow::anyhow!("time {text:?} does not exist in the local time zone"))
}

/// `yyyy-MM-dd#HH:mm:ss:SSS` as a date and time without a zone.
fn parse_datetime(text: &str) -> Option<NaiveDateTime> {
    let (date, time) = text.split_once('#')?;
    let date: Vec<&str> = date.split('-').collect();
    let time: Vec<&str> = time.split(':').collect();
    if date.len() != 3 || time.len() != 4 {
        return None;
    }
    let num = |s: &str, len: usize| -> Option<i64> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (year, month, day) = (num(date[0], 4)?, num(date[1], 2)?, num(date[2], 2)?);
    let (hour, minute, second, milli) = (
        num(time[0], 2)?,
        num(time[1], 2)?,
        num(time[2], 2)?,
        num(time[3], 3)?,
    );
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    NaiveDate::from_ymd_opt(year as i32, month as u32, day as u32)?.and_hms_milli_opt(
        hour as u32,
        minute as u32,
        second as u32,
        milli as u32,
    )
}

/// `yyyy-MM-dd HH:mm:ss.SSS` in the local time zone for a positive time, `N/A` otherwise.
pub fn format_time(ms: i64) -> String {
    format_in(ms, &Local, "%Y-%m-%d %H:%M:%S%.3f")
}

/// `yyyy-MM-dd HH:mm:ss` in the local time zone (mqadmin's `#LastTime`), `N/A` for 0.
pub fn format_time_seconds(ms: i64) -> String {
    format_in(ms, &Local, "%Y-%m-%d %H:%M:%S")
}

fn format_in<Z: TimeZone>(ms: i64, zone: &Z, pattern: &str) -> String
where
    Z::Offset: std::fmt::Display,
{
    if ms <= 0 {
        return "N/A".into();
    }
    match zone.timestamp_millis_opt(ms).single() {
        Some(time) => time.format(pattern).to_string(),
        None => "N/A".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let now = 1_767_225_600_000;
        let parse_time = |text: &str, now: i64| parse_time_in(text, now, &chrono::Utc);
        assert_eq!(parse_time("now", now).unwrap(), now);
        assert_eq!(parse_time("1767225600000", 0).unwrap(), now);
        assert_eq!(parse_time("2026-01-01#00:00:00:000", 0).unwrap(), now);
        assert_eq!(
            parse_time("2026-01-01#00:00:01:250", 0).unwrap(),
            now + 1250
        );
        assert_eq!(parse_time("-1h", now).unwrap(), now - 3_600_000);
        assert_eq!(parse_time("-30m", now).unwrap(), now - 1_800_000);
        assert_eq!(parse_time("-10s", now).unwrap(), now - 10_000);
        for bad in [
            "",
            "yesterday",
            "-1y",
            "-h",
            "2026-13-01#00:00:00:000",
            "2026-02-30#00:00:00:000",
            "2026-01-01 00:00:00",
        ] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
        let utc = |ms| format_in(ms, &chrono::Utc, "%Y-%m-%d %H:%M:%S%.3f");
        assert_eq!(utc(now + 1250), "2026-01-01 00:00:01.250");
        assert_eq!(utc(0), "N/A");
        assert_eq!(format_time(0), "N/A");
        let plus_eight = chrono::FixedOffset::east_opt(8 * 3600).unwrap();
        assert_eq!(
            parse_time_in("2026-01-01#08:00:00:000", 0, &plus_eight).unwrap(),
            now
        );
        assert_eq!(
            format_in(now, &plus_eight, "%Y-%m-%d %H:%M:%S"),
            "2026-01-01 08:00:00"
        );
    }
}
