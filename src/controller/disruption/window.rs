//! The disruption controls given as flags: how many nodes may be emptied at once
//! (`--disruption-budget`), and when (`--disruption-schedule`). Pure: no clock is read here.
//!
//! Rules enforced here:
//! - a **budget** is a count of nodes (`2`) or a share of the pool's nodes (`10%`, from 0% to
//!   100%), a share rounded up as Karpenter rounds it (10% of 19 nodes allows 2); anything else
//!   is refused with what was expected;
//! - a **window** is a cron schedule of five fields (minute, hour, day of month, month, day of
//!   week; `*`, lists, ranges, steps, month and day names; day of week 0 or 7 is Sunday) or one
//!   of `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`, then a duration (`8h`, `30m`,
//!   `1h30m`, at least a minute, at most 366 days), in UTC as Karpenter reads its schedules. It is
//!   open from each minute the schedule names for the duration. As in cron, when both the day of
//!   month and the day of week are restricted, either one matching is enough. A schedule that
//!   names no day of any year (`0 0 31 2 * 1h`: 31 February) is refused: it would never open.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

/// How many of a pool's nodes may be emptied at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    Nodes(u32),
    /// Percent of the pool's nodes, rounded up.
    Share(u8),
}

impl Default for Budget {
    /// Karpenter's default: 10% of the nodes.
    fn default() -> Self {
        Budget::Share(10)
    }
}

impl Budget {
    /// The nodes that may be emptied at once in a pool of `nodes`.
    pub fn allowed(self, nodes: usize) -> usize {
        match self {
            Budget::Nodes(count) => usize::try_from(count).unwrap_or(usize::MAX),
            Budget::Share(percent) => nodes.saturating_mul(usize::from(percent)).div_ceil(100),
        }
    }
}

impl FromStr for Budget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refused = || {
            format!(
                "{text:?} is not a disruption budget: give a count of nodes (e.g. 2) or a share \
                 of the pool's nodes from 0% to 100% (e.g. 10%)"
            )
        };
        match text.strip_suffix('%') {
            Some(percent) => match percent.parse::<u8>() {
                Ok(p) if p <= 100 && !percent.starts_with('+') => Ok(Budget::Share(p)),
                _ => Err(refused()),
            },
            None if !text.starts_with('+') => {
                text.parse().map(Budget::Nodes).map_err(|_| refused())
            }
            None => Err(refused()),
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Budget::Nodes(count) => write!(f, "{count}"),
            Budget::Share(percent) => write!(f, "{percent}%"),
        }
    }
}

/// A time when voluntary disruption may happen: a cron schedule and how long each opening lasts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    text: String,
    schedule: Schedule,
    duration: Duration,
}

/// The longest window: a year and a day.
const LONGEST: Duration = Duration::from_secs(366 * 24 * 3600);

impl FromStr for Window {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let refused = |why: String| {
            format!(
                "{text:?} is not a disruption schedule: {why}; give a cron schedule of five \
                 fields (or @daily, @weekly, ...) and a duration, e.g. \"0 22 * * mon-fri 8h\""
            )
        };
        let (cron, duration) = match words.as_slice() {
            [macro_, duration] if macro_.starts_with('@') => {
                (expand(macro_).map_err(refused)?, *duration)
            }
            [m, h, dom, mon, dow, duration] => ([*m, *h, *dom, *mon, *dow], *duration),
            _ => return Err(refused("expected five cron fields and a duration".into())),
        };
        let schedule = Schedule::parse(cron).map_err(refused)?;
        if !schedule.names_a_day() {
            return Err(refused(
                "it never opens: no date has that day of month in that month (e.g. 31 February)"
                    .into(),
            ));
        }
        let duration = parse_duration(duration).map_err(refused)?;
        Ok(Window {
            text: words.join(" "),
            schedule,
            duration,
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Window {
    /// Whether the window is open at `now`: a minute the schedule names lies within the duration
    /// before it.
    pub fn open_at(&self, now: Timestamp) -> bool {
        let now_minute = now.as_second().div_euclid(60);
        let span = i64::try_from(self.duration.as_secs().div_ceil(60)).unwrap_or(i64::MAX);
        // The earliest minute whose opening still covers `now`.
        let earliest = now_minute.saturating_sub(span).saturating_add(1);
        let mut minute = now_minute;
        while minute >= earliest {
            let Some(at) = civil(minute) else {
                return false;
            };
            // Minutes since the start of this day and of this hour, this one included.
            let into_hour = i64::from(at.minute).saturating_add(1);
            let into_day = i64::from(at.hour)
                .saturating_mul(60)
                .saturating_add(into_hour);
            if !self.schedule.day_matches(&at) {
                // Before this day's first minute.
                minute = minute.saturating_sub(into_day);
            } else if !self.schedule.hours.has(at.hour) {
                minute = minute.saturating_sub(into_hour);
            } else if self.schedule.minutes.has(at.minute) {
                return true;
            } else {
                minute = minute.saturating_sub(1);
            }
        }
        false
    }
}

/// Whether any of `windows` is open at `now`; none given means always.
pub fn open(windows: &[Window], now: Timestamp) -> bool {
    windows.is_empty() || windows.iter().any(|w| w.open_at(now))
}

/// A minute's civil fields in UTC.
struct Civil {
    minute: u8,
    hour: u8,
    day: u8,
    month: u8,
    /// Sunday 0.
    weekday: u8,
}

fn civil(minute: i64) -> Option<Civil> {
    let at = Timestamp::from_second(minute.checked_mul(60)?)
        .ok()?
        .to_zoned(TimeZone::UTC);
    Some(Civil {
        minute: u8::try_from(at.minute()).ok()?,
        hour: u8::try_from(at.hour()).ok()?,
        day: u8::try_from(at.day()).ok()?,
        month: u8::try_from(at.month()).ok()?,
        weekday: u8::try_from(at.weekday().to_sunday_zero_offset()).ok()?,
    })
}

/// A set of values of one field (bit i = value i).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// Written `*` (or `*/1`): unrestricted, for the day-of-month / day-of-week rule.
    any: bool,
}

impl Field {
    fn has(self, value: u8) -> bool {
        value < 64 && self.bits & (1u64 << value) != 0
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Schedule {
    minutes: Field,
    hours: Field,
    days: Field,
    months: Field,
    weekdays: Field,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Schedule {
    fn parse([minute, hour, day, month, weekday]: [&str; 5]) -> Result<Schedule, String> {
        let mut weekdays = field(weekday, "day of week", 0, 7, &DAYS, 0)?;
        // 7 is Sunday too.
        if weekdays.has(7) {
            weekdays.bits |= 1;
        }
        Ok(Schedule {
            minutes: field(minute, "minute", 0, 59, &[], 0)?,
            hours: field(hour, "hour", 0, 23, &[], 0)?,
            days: field(day, "day of month", 1, 31, &[], 0)?,
            months: field(month, "month", 1, 12, &MONTHS, 1)?,
            weekdays,
        })
    }

    /// Whether any day matches, ever. Hours and minutes always name at least one value, so this
    /// is whether the schedule ever opens. Eight years from 2028 hold every month's every day
    /// (29 February of 2028 and 2032) and every month's every weekday, which is all a day's
    /// match depends on.
    fn names_a_day(&self) -> bool {
        // 2028-01-01T00:00:00Z, in minutes.
        const FROM: i64 = 1_830_297_600 / 60;
        const DAY: i64 = 24 * 60;
        (0..8 * 366).any(|day: i64| {
            civil(FROM.saturating_add(day.saturating_mul(DAY)))
                .is_some_and(|at| self.day_matches(&at))
        })
    }

    fn day_matches(&self, at: &Civil) -> bool {
        if !self.months.has(at.month) {
            return false;
        }
        let (day, weekday) = (self.days.has(at.day), self.weekdays.has(at.weekday));
        match (self.days.any, self.weekdays.any) {
            (false, false) => day || weekday,
            _ => day && weekday,
        }
    }
}

/// One field: `*`, or a comma list of `v`, `a-b`, each with an optional `/step`.
fn field(
    text: &str,
    what: &str,
    low: u8,
    high: u8,
    names: &[&str],
    first: u8,
) -> Result<Field, String> {
    let value = |word: &str| -> Result<u8, String> {
        let lower = word.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return u8::try_from(i)
                .map(|i| i.saturating_add(first))
                .map_err(|e| e.to_string());
        }
        match word.parse::<u8>() {
            Ok(v) if (low..=high).contains(&v) => Ok(v),
            _ => Err(format!("{what} {word:?} is not in {low}-{high}")),
        }
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => match step.parse::<u8>() {
                Ok(s) if s > 0 => (range, s),
                _ => return Err(format!("{what} step {step:?} is not a positive number")),
            },
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (low, high),
            _ => match range.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                // `v/step` runs from v to the end, as in cron.
                None if step > 1 => (value(range)?, high),
                None => {
                    let v = value(range)?;
                    (v, v)
                }
            },
        };
        if from > to {
            return Err(format!("{what} range {range:?} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            bits |= 1u64 << v;
            v = match v.checked_add(step) {
                Some(next) => next,
                None => break,
            };
        }
    }
    Ok(Field {
        bits,
        any: text == "*" || text == "*/1",
    })
}

fn expand(macro_: &str) -> Result<[&'static str; 5], String> {
    Ok(match macro_ {
        "@yearly" | "@annually" => ["0", "0", "1", "1", "*"],
        "@monthly" => ["0", "0", "1", "*", "*"],
        "@weekly" => ["0", "0", "*", "*", "0"],
        "@daily" | "@midnight" => ["0", "0", "*", "*", "*"],
        "@hourly" => ["0", "*", "*", "*", "*"],
        _ => return Err(format!("{macro_} is not a schedule")),
    })
}

/// `8h`, `30m`, `1h30m`, `90s`: whole numbers with units h, m, s, at least a minute.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let refused = || format!("duration {text:?} is not like 8h, 30m or 1h30m");
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(refused()),
        };
        let n: u64 = digits.parse().map_err(|_| refused())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(refused)?;
        digits.clear();
    }
    if !digits.is_empty() || text.is_empty() {
        return Err(refused());
    }
    let duration = Duration::from_secs(total);
    if duration < Duration::from_secs(60) || duration > LONGEST {
        return Err(format!("duration {text:?} is not between 1m and 366 days"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn budgets_are_counts_or_shares_rounded_up() {
        let cases: [(&str, usize, usize); 7] = [
            ("2", 50, 2),
            ("0", 50, 0),
            ("10%", 19, 2),
            ("10%", 10, 1),
            ("10%", 0, 0),
            ("100%", 7, 7),
            ("0%", 100, 0),
        ];
        for (text, nodes, allowed) in cases {
            let budget: Budget = text.parse().unwrap();
            assert_eq!(budget.allowed(nodes), allowed, "{text} of {nodes}");
            assert_eq!(budget.to_string(), text);
        }
        for bad in [
            "", "-1", "101%", "10.5%", "ten", "%", "+3", "+5%", "2 nodes",
        ] {
            let error = bad.parse::<Budget>().unwrap_err();
            assert!(error.contains("not a disruption budget"), "{bad}: {error}");
        }
    }

    #[test]
    fn windows_open_from_each_scheduled_minute_for_their_duration() {
        // Weeknights from 22:00 for 8 hours (2026-12-04 is a Friday, 12-05 a Saturday).
        let nights: Window = "0 22 * * mon-fri 8h".parse().unwrap();
        let cases = [
            ("2026-12-04T21:59:59Z", false),
            ("2026-12-04T22:00:00Z", true),
            ("2026-12-05T05:59:59Z", true), // Friday's opening, into Saturday
            ("2026-12-05T06:00:00Z", false),
            ("2026-12-05T22:30:00Z", false), // Saturday night
            ("2026-12-07T23:00:00Z", true),  // Monday night
        ];
        for (now, open) in cases {
            assert_eq!(nights.open_at(at(now)), open, "{now}");
        }
        let hourly: Window = "@hourly 10m".parse().unwrap();
        assert!(hourly.open_at(at("2026-12-04T13:09:00Z")));
        assert!(!hourly.open_at(at("2026-12-04T13:10:00Z")));
        // Day of month or day of week, as cron reads both restricted: the 1st, or any Sunday.
        let either: Window = "30 2 1 * sun 1h".parse().unwrap();
        assert!(either.open_at(at("2026-12-01T02:45:00Z"))); // a Tuesday, the 1st
        assert!(either.open_at(at("2026-12-06T02:45:00Z"))); // a Sunday
        assert!(!either.open_at(at("2026-12-02T02:45:00Z")));
        // Steps, lists, 7 for Sunday, month names.
        let steps: Window = "*/15 9-17 * dec 7 5m".parse().unwrap();
        assert!(steps.open_at(at("2026-12-06T09:46:00Z")));
        assert!(!steps.open_at(at("2026-12-06T09:50:00Z")));
        assert!(!steps.open_at(at("2026-11-29T09:46:00Z")));
        assert!(open(&[], at("2026-12-06T09:50:00Z")), "no window: always");
        assert!(!open(
            std::slice::from_ref(&nights),
            at("2026-12-05T22:30:00Z")
        ));
        assert!(open(&[nights, hourly], at("2026-12-05T22:05:00Z")));
    }

    #[test]
    fn a_long_window_is_found_without_walking_every_minute() {
        // Opens on 1 January for 366 days: always open, found by skipping days.
        let yearly: Window = "@yearly 8784h".parse().unwrap();
        assert!(yearly.open_at(at("2026-12-31T23:59:00Z")));
        assert!(yearly.open_at(at("2027-01-01T00:00:00Z")));
    }

    #[test]
    fn a_schedule_that_opens_only_in_leap_years_or_on_a_weekday_is_accepted() {
        // 29 February opens once in four years; 31 February on a Monday opens every Monday of
        // February (both restricted: either one matching is enough); the 31st opens in the
        // months that have one.
        for text in [
            "0 0 29 2 * 1h",
            "0 0 31 2 mon 1h",
            "0 0 31 1-4 * 1h",
            "0 0 30 feb-mar * 1h",
        ] {
            assert!(text.parse::<Window>().is_ok(), "{text}");
        }
        let leap: Window = "0 0 29 2 * 1h".parse().unwrap();
        assert!(leap.open_at(at("2028-02-29T00:30:00Z")));
    }

    #[test]
    fn bad_schedules_are_refused_saying_what_is_wrong() {
        let cases = [
            ("0 22 * * mon-fri", "five cron fields and a duration"),
            ("0 22 * * mon-fri 8", "duration \"8\""),
            ("0 22 * * mon-fri 30s", "between 1m and 366 days"),
            ("0 22 * * mon-fri 9000h", "between 1m and 366 days"),
            ("60 22 * * * 1h", "minute \"60\""),
            ("0 24 * * * 1h", "hour \"24\""),
            ("0 0 0 * * 1h", "day of month \"0\""),
            ("0 0 * 13 * 1h", "month \"13\""),
            ("0 0 * * funday 1h", "day of week \"funday\""),
            ("0 0 * * 5-1 1h", "runs backwards"),
            ("*/0 0 * * * 1h", "step \"0\""),
            ("@often 1h", "@often is not a schedule"),
            ("0 0 31 2 * 1h", "it never opens"),
            ("0 0 30,31 feb * 1h", "it never opens"),
            ("0 0 31 apr,jun,sep,nov * 8h", "it never opens"),
        ];
        for (text, says) in cases {
            let error = text.parse::<Window>().unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
            assert!(error.contains("not a disruption schedule"), "{error}");
        }
    }
}
