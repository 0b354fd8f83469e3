//! Time arguments of `ferromq admin` (`-s`, `--since`) and time columns.
//!
//! Accepted forms: `now`; epoch milliseconds (`1767225600000`); mqadmin's
//! `yyyy-MM-dd#HH:mm:ss:SSS` (read as UTC: the CLI carries no time zone database, where
//! mqadmin uses the local zone); and ferromq's relative forms `-<n><unit>` with unit `ms`,
//! `s`, `m`, `h` or `d` (`-1h`, `-30m`, `-10s`), meaning that long before now.

use anyhow::Result;

/// Parses a time argument into epoch milliseconds; `now_ms` anchors `now` and relative forms.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64> {
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
    parse_datetime(text).ok_or_else(bad)
}

/// `yyyy-MM-dd#HH:mm:ss:SSS` as UTC epoch milliseconds.
fn parse_datetime(text: &str) -> Option<i64> {
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
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + milli)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `yyyy-MM-dd HH:mm:ss.SSS` (UTC) for a positive time, `N/A` otherwise.
pub fn format_time(ms: i64) -> String {
    if ms <= 0 {
        return "N/A".into();
    }
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second, milli) = (
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000,
    );
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}.{milli:03}")
}

/// Milliseconds since the epoch now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let now = 1_767_225_600_000;
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
        assert_eq!(format_time(now + 1250), "2026-01-01 00:00:01.250");
        assert_eq!(format_time(0), "N/A");
    }
}
