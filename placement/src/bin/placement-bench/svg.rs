//! The fragmentation study as a hand-written SVG picture: three panels of grouped bars.

use std::fmt::Write as _;

use crate::fragmentation::{BIG_REQUEST_UNITS, Outcome, SEED_HOSTS, large_share, share};

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const FIT: &str = "#2e7d32";
const SHORT: &str = "#90a4ae";
const SERIES: [&str; 5] = ["#37474f", "#78909c", "#1565c0", "#ef6c00", "#6a1b9a"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Canvas {
    out: String,
}

impl Canvas {
    fn text(&mut self, x: f64, y: f64, size: f64, anchor: &str, fill: &str, body: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{fill}">{}</text>"#,
            escape(body)
        );
    }

    fn bold(&mut self, x: f64, y: f64, size: f64, body: &str) {
        let _ = writeln!(
            self.out,
            r##"<text x="{x:.1}" y="{y:.1}" font-size="{size}" font-weight="bold" fill="#212121">{}</text>"##,
            escape(body)
        );
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"/>"#
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, dash: bool) {
        let dash = if dash {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            self.out,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="1"{dash}/>"#
        );
    }

    /// A value axis from 0 to `max` with gridlines at `ticks`, for a panel spanning
    /// `top..bottom`.
    fn axis(&mut self, top: f64, bottom: f64, max: f64, ticks: &[f64], unit: &str) {
        for &tick in ticks {
            let y = bottom - (bottom - top) * tick / max;
            self.line(LEFT, y, WIDTH - RIGHT, y, "#e0e0e0", false);
            self.text(
                LEFT - 8.0,
                y + 4.0,
                11.0,
                "end",
                "#616161",
                &format!("{tick}{unit}"),
            );
        }
        self.line(LEFT, bottom, WIDTH - RIGHT, bottom, "#424242", false);
    }

    fn legend(&mut self, x: f64, y: f64, items: &[(&str, &str)]) {
        let mut x = x;
        for (color, label) in items {
            self.rect(x, y - 10.0, 12.0, 12.0, color);
            self.text(x + 18.0, y, 12.0, "start", "#424242", label);
            x += 30.0 + 7.5 * label.len() as f64;
        }
    }
}

/// The picture: the seed example's hosts, the trace's placed share and utilisation, and the
/// largest request each policy can still place.
pub fn render(outcomes: &[Outcome], seed: u64) -> String {
    let height = 1060.0;
    let mut c = Canvas { out: String::new() };
    let _ = writeln!(
        c.out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    c.rect(0.0, 0.0, WIDTH, height, "white");
    c.bold(
        20.0,
        30.0,
        18.0,
        "Fragmentation by placement policy (tenant-placer, placement-bench)",
    );

    let groups = outcomes.len().max(1) as f64;
    let span = WIDTH - LEFT - RIGHT;
    let group_width = span / groups;

    // Panel A: the seed's four hosts.
    let (top, bottom) = (90.0, 330.0);
    c.bold(
        20.0,
        62.0,
        14.0,
        &format!(
            "1. The seed's example: free threads on four 8-thread hosts before a {BIG_REQUEST_UNITS}-thread request"
        ),
    );
    c.axis(top, bottom, 8.0, &[0.0, 2.0, 4.0, 6.0, 8.0], "");
    let need = bottom - (bottom - top) * BIG_REQUEST_UNITS as f64 / 8.0;
    c.line(LEFT, need, WIDTH - RIGHT, need, "#c62828", true);
    for (g, o) in outcomes.iter().enumerate() {
        let x0 = LEFT + group_width * g as f64;
        let bar = group_width / 6.0;
        for (h, host) in SEED_HOSTS.iter().enumerate() {
            let free = o
                .snapshot
                .iter()
                .find(|(name, _)| name == host)
                .map_or(0, |(_, free)| free.threads);
            let x = x0 + bar * (h as f64 + 1.0);
            let y = bottom - (bottom - top) * free as f64 / 8.0;
            let color = if free >= BIG_REQUEST_UNITS {
                FIT
            } else {
                SHORT
            };
            c.rect(x + 2.0, y, bar - 4.0, bottom - y, color);
            c.text(
                x + bar / 2.0,
                y - 4.0,
                11.0,
                "middle",
                "#212121",
                &free.to_string(),
            );
            c.text(
                x + bar / 2.0,
                bottom + 14.0,
                10.0,
                "middle",
                "#616161",
                host,
            );
        }
        c.text(
            x0 + group_width / 2.0,
            bottom + 32.0,
            13.0,
            "middle",
            "#212121",
            o.policy.name(),
        );
        let (verdict, color) = match &o.big_request_node {
            Some(node) => (format!("{BIG_REQUEST_UNITS}-thread request: {node}"), FIT),
            None => (
                format!("{BIG_REQUEST_UNITS}-thread request: no fit"),
                "#c62828",
            ),
        };
        c.text(
            x0 + group_width / 2.0,
            bottom + 48.0,
            12.0,
            "middle",
            color,
            &verdict,
        );
    }
    c.legend(
        LEFT,
        bottom + 72.0,
        &[
            (FIT, "room for the next request"),
            (SHORT, "too little room: fragments"),
        ],
    );
    let x = LEFT + 470.0;
    c.line(x, bottom + 67.0, x + 24.0, bottom + 67.0, "#c62828", true);
    c.text(
        x + 30.0,
        bottom + 72.0,
        12.0,
        "start",
        "#424242",
        &format!("the next request needs {BIG_REQUEST_UNITS} threads"),
    );

    // Panel B: share placed and utilisation at the end of the trace.
    let (top, bottom) = (470.0, 720.0);
    c.bold(
        20.0,
        440.0,
        14.0,
        &format!(
            "2. The seeded trace ({seed:#x}, {} arrivals): share of requests placed (all; >= 16 units), utilisation at the end",
            outcomes.first().map_or(0, |o| o.arrivals)
        ),
    );
    c.axis(top, bottom, 100.0, &[0.0, 25.0, 50.0, 75.0, 100.0], "%");
    for (g, o) in outcomes.iter().enumerate() {
        let x0 = LEFT + group_width * g as f64;
        let bar = group_width / 7.0;
        let [t, m, s] = o.utilisation;
        for (i, value) in [share(o), large_share(o), t, m, s].into_iter().enumerate() {
            let x = x0 + bar * (i as f64 + 1.0);
            let y = bottom - (bottom - top) * value.clamp(0.0, 100.0) / 100.0;
            c.rect(
                x + 2.0,
                y,
                bar - 4.0,
                bottom - y,
                SERIES.get(i).copied().unwrap_or(SHORT),
            );
            c.text(
                x + bar / 2.0,
                y - 4.0,
                10.0,
                "middle",
                "#212121",
                &format!("{value:.1}"),
            );
        }
        c.text(
            x0 + group_width / 2.0,
            bottom + 18.0,
            13.0,
            "middle",
            "#212121",
            o.policy.name(),
        );
    }
    c.legend(
        LEFT,
        bottom + 44.0,
        &[
            (SERIES[0], "requests placed"),
            (SERIES[1], "large requests placed"),
            (SERIES[2], "threads used"),
            (SERIES[3], "memory used"),
            (SERIES[4], "storage used"),
        ],
    );

    // Panel C: the largest request still placeable at the end.
    let (top, bottom) = (840.0, 990.0);
    c.bold(
        20.0,
        810.0,
        14.0,
        "3. At the end: the largest request still placeable, k x (1 thread, 4 GB, 50 GB) on one node",
    );
    let max_units = outcomes
        .iter()
        .map(|o| o.largest_units)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let step = (max_units / 4.0).ceil().max(1.0);
    let ticks: Vec<f64> = (0..=4).map(|i| step * f64::from(i)).collect();
    let axis_max = step * 4.0;
    c.axis(top, bottom, axis_max, &ticks, "");
    for (g, o) in outcomes.iter().enumerate() {
        let x0 = LEFT + group_width * g as f64;
        let bar = group_width / 3.0;
        let x = x0 + bar;
        let y = bottom - (bottom - top) * o.largest_units as f64 / axis_max;
        c.rect(x + 2.0, y, bar - 4.0, bottom - y, SERIES[2]);
        c.text(
            x + bar / 2.0,
            y - 4.0,
            11.0,
            "middle",
            "#212121",
            &format!("k = {}", o.largest_units),
        );
        c.text(
            x0 + group_width / 2.0,
            bottom + 18.0,
            13.0,
            "middle",
            "#212121",
            o.policy.name(),
        );
        c.text(
            x0 + group_width / 2.0,
            bottom + 34.0,
            10.0,
            "middle",
            "#616161",
            &format!(
                "largest free: {} thr / {} GB / {} GB",
                o.largest_free.threads, o.largest_free.memory_gb, o.largest_free.storage_gb
            ),
        );
    }
    c.out.push_str("</svg>\n");
    c.out
}
