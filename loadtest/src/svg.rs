//! Plots written by hand as SVG: a line chart, grouped bars and horizontal
//! bars, enough for the run report. No plotting crate.

use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            return m * mag;
        }
    }
    10.0 * mag
}

fn frame(title: &str, x_label: &str, y_label: &str, y_max: f64) -> String {
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        esc(title)
    );
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let _ = writeln!(
        s,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/>\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\" stroke=\"black\"/>"
    );
    for i in 0..=4 {
        let v = y_max * i as f64 / 4.0;
        let y = y0 - (y0 - y1) * i as f64 / 4.0;
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 4.0,
            y + 4.0,
            fmt_num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
        (x0 + x1) / 2.0,
        H - 12.0,
        esc(x_label),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
    s
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A line chart of named series of (x, y) points.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let x_max = nice_max(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .fold(0.0, f64::max),
    );
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .fold(0.0, f64::max),
    );
    let mut s = frame(title, x_label, y_label, y_max);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    for i in 0..=4 {
        let v = x_max * i as f64 / 4.0;
        let x = x0 + (x1 - x0) * i as f64 / 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y0 + 16.0,
            fmt_num(v)
        );
    }
    for (k, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| {
                format!(
                    "{:.1},{:.1}",
                    x0 + (x1 - x0) * x / x_max,
                    y0 - (y0 - y1) * y / y_max
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
            path.join(" "),
            x0 + 10.0,
            y1 + 14.0 + 14.0 * k as f64,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Vertical bars: one group per category, one bar per series in it.
pub fn bars(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let y_max = nice_max(
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .fold(0.0, f64::max),
    );
    let mut s = frame(title, "", y_label, y_max);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let n = categories.len().max(1) as f64;
    let group = (x1 - x0) / n;
    let k = series.len().max(1) as f64;
    let bar = (group * 0.8 / k).max(0.5);
    let label_every = ((categories.len() as f64 / 25.0).ceil() as usize).max(1);
    for (ci, c) in categories.iter().enumerate() {
        let gx = x0 + group * ci as f64 + group * 0.1;
        for (si, (_, vals)) in series.iter().enumerate() {
            let v = vals.get(ci).copied().unwrap_or(0.0);
            let h = (y0 - y1) * v / y_max;
            let _ = writeln!(
                s,
                "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{bar:.2}\" height=\"{h:.2}\" fill=\"{}\"><title>{} {}: {}</title></rect>",
                gx + bar * si as f64,
                y0 - h,
                COLORS[si % COLORS.len()],
                esc(c),
                esc(&series[si].0),
                fmt_num(v)
            );
        }
        if ci % label_every == 0 {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{}</text>",
                gx + group * 0.4,
                y0 + 14.0,
                esc(c)
            );
        }
    }
    if series.len() > 1 {
        for (si, (name, _)) in series.iter().enumerate() {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{}\">{}</text>",
                x0 + 10.0 + 90.0 * si as f64,
                y1 + 12.0,
                COLORS[si % COLORS.len()],
                esc(name)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Horizontal bars (label → value), for long labels such as fault messages.
pub fn hbars(title: &str, x_label: &str, rows: &[(String, f64)]) -> String {
    let x_max = nice_max(rows.iter().map(|r| r.1).fold(0.0, f64::max));
    let row_h = 22.0;
    let h = TOP + 20.0 + row_h * rows.len().max(1) as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"{W}\" height=\"{h}\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        esc(title)
    );
    if rows.is_empty() {
        let _ = writeln!(s, "<text x=\"20\" y=\"{}\">none</text>", TOP + 16.0);
    }
    let (x0, x1) = (W * 0.45, W - 50.0);
    for (i, (label, v)) in rows.iter().enumerate() {
        let y = TOP + 10.0 + row_h * i as f64;
        let w = (x1 - x0) * v / x_max;
        let short: String = label.chars().take(70).collect();
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"9\">{}</text>\
             <rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x0 - 4.0,
            y + 13.0,
            esc(&short),
            row_h - 6.0,
            COLORS[3],
            x0 + w + 4.0,
            y + 13.0,
            fmt_num(*v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        (x0 + x1) / 2.0,
        h - 10.0,
        esc(x_label)
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_are_svg_with_data() {
        let l = lines("t", "s", "n", &[("a".into(), vec![(0.0, 1.0), (1.0, 3.0)])]);
        assert!(l.starts_with("<svg") && l.trim_end().ends_with("</svg>"));
        assert!(l.contains("<polyline"));
        let b = bars("t", "ms", &["x<y".into()], &[("p50".into(), vec![2.0])]);
        assert!(b.contains("<rect x=") && b.contains("x&lt;y"));
        let h = hbars("t", "n", &[("boom".into(), 3.0)]);
        assert!(h.contains("boom"));
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(0.0), 1.0);
    }
}
