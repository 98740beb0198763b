//! Wall-clock time behind a trait, so documents that carry timestamps can be
//! produced deterministically in tests, and RFC 3339 text for them.

/// Seconds since the Unix epoch, from somewhere.
pub trait Clock {
    fn now(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64)
    }
}

/// A clock stopped at one instant.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub i64);

impl Clock for FixedClock {
    fn now(&self) -> i64 {
        self.0
    }
}

/// An instant written `YYYY-MM-DDTHH:MM:SSZ` (a flag's `--at`): read with
/// [`parse_rfc3339`], written back as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp(pub i64);

impl std::str::FromStr for Timestamp {
    type Err = String;

    fn from_str(text: &str) -> Result<Timestamp, String> {
        parse_rfc3339(text)
            .map(Timestamp)
            .ok_or_else(|| format!("{text:?} is not YYYY-MM-DDTHH:MM:SSZ"))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&format_rfc3339(self.0))
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds (proleptic Gregorian, UTC).
pub fn format_rfc3339(unix_seconds: i64) -> String {
    let days = unix_seconds.div_euclid(86_400);
    let seconds = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// Parses what [`format_rfc3339`] writes.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    if bytes[13] != b':' || bytes[16] != b':' || bytes[19] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|byte| byte.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    (civil_from_days(days) == (year, month, day))
        .then_some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Milliseconds since 1970 from RFC 3339 as gateways write it: `T` or a
/// space between date and time, any fraction of a second, and `Z`, an
/// offset, or nothing (read as UTC).
pub fn parse_timestamp_ms(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() < 19 || !matches!(bytes[10], b'T' | b't' | b' ') {
        return None;
    }
    let whole = format!("{}T{}Z", &text[..10], &text[11..19]);
    let seconds = parse_rfc3339(&whole)?;
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let offset = &rest[1..];
            let (hours, minutes) = offset.split_once(':').unwrap_or((offset, "00"));
            if hours.len() != 2 || minutes.len() != 2 {
                return None;
            }
            let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            sign * (hours * 60 + minutes)
        }
    };
    Some((seconds - offset_minutes * 60) * 1000 + millis)
}

// Howard Hinnant's algorithms for days since 1970-01-01.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_is_written_as_it_was_read_and_a_bad_one_named() {
        let at: Timestamp = "2026-12-01T00:00:00Z".parse().unwrap();
        assert_eq!(at.to_string(), "2026-12-01T00:00:00Z");
        assert_eq!(
            "2026-02-30T00:00:00Z".parse::<Timestamp>().unwrap_err(),
            "\"2026-02-30T00:00:00Z\" is not YYYY-MM-DDTHH:MM:SSZ"
        );
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_985_696), "2026-11-29T20:54:56Z");
    }

    #[test]
    fn parsing_inverts_formatting() {
        for seconds in [
            0,
            59,
            86_399,
            951_782_400,
            1_795_985_696,
            4_102_444_800,
            -86_400,
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(seconds)), Some(seconds));
        }
        for bad in [
            "2026-02-30T00:00:00Z",
            "2026-11-29 20:00:00Z",
            "2026-11-29T24:00:00Z",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
