//! Tables in the style of upstream's prettytable output.

/// Renders `rows` under `headers` with `+---+` borders.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let sep: String = widths
        .iter()
        .map(|w| format!("+{}", "-".repeat(w + 2)))
        .collect::<String>()
        + "+\n";
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("| {c:<w$} "))
            .collect::<String>()
            + "|\n"
    };
    let mut out = sep.clone();
    out.push_str(&line(headers.to_vec()));
    out.push_str(&sep);
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out.push_str(&sep);
    out
}
