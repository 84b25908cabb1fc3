//! The one duration syntax of every lfrt command: cyclictest's `-D` forms.
//!
//! A whole number with an optional unit: `30` and `30s` are seconds, `10m` minutes, `1h` hours,
//! `1d` days (case-insensitive, as cyclictest). `ms` (milliseconds) is lfrt's one extension, for
//! the short bounded runs of tests and smoke checks. Fractions, signs, `nan`, `inf` and values
//! past [`MAX`] are errors that say what is accepted, so a bad value is refused while parsing
//! the arguments, before anything starts.

use std::time::Duration;

/// The longest duration any command accepts: 365 days.
pub const MAX: Duration = Duration::from_secs(365 * 86_400);

/// Parses `30`, `30s`, `500ms`, `10m`, `1h` or `1d` (see the module docs). `0` is a zero
/// duration; what zero means (usually "no limit") is up to the command.
pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, unit) = t.split_at(digits);
    let ms_per_unit: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "s" => 1000,
        "ms" => 1,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ if num.is_empty() => {
            return Err(format!(
                "`{s}`: expected a whole number, optionally followed by ms, s, m, h or d"
            ))
        }
        _ => return Err(format!("`{s}`: the unit must be ms, s, m, h or d")),
    };
    let n: u64 = num.parse().map_err(|_| {
        format!("`{s}`: expected a whole number, optionally followed by ms, s, m, h or d")
    })?;
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .filter(|d| *d <= MAX)
        .ok_or_else(|| format!("`{s}` is longer than the limit of 365 days"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cyclictest_forms_and_milliseconds() {
        assert_eq!(parse("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("2H"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("365d"), Ok(MAX));
    }

    #[test]
    fn everything_else_is_refused_with_a_reason() {
        for bad in [
            "",
            "10x",
            "1.5m",
            "m",
            "nan",
            "inf",
            "-1",
            "+3",
            "1e300",
            "0.5",
            "1 s",
            "366d",
            "99999999999999999999",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
    }
}
