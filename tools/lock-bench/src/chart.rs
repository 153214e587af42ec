//! The hand-off latency chart: one panel per scenario, one CDF line per contender, on a log
//! latency axis. SVG backend only; plotters' built-in text layout (no font files, no
//! fontconfig/freetype) writes labels as SVG `<text>` for the viewer to render.

use std::path::Path;

use plotters::prelude::*;

use crate::stats::Sample;

const COLORS: [RGBColor; 4] = [
    RGBColor(0xd6, 0x27, 0x28), // ours
    RGBColor(0x1f, 0x77, 0xb4), // floor
    RGBColor(0x7f, 0x7f, 0x7f), // rslock
    RGBColor(0x2c, 0xa0, 0x2c), // native floor, where it runs
];

/// One panel: a title and `(contender, sample)` pairs.
pub(crate) struct Panel<'a> {
    pub(crate) title: String,
    pub(crate) series: Vec<(&'a str, &'a Sample)>,
}

pub(crate) fn write(path: &Path, panels: &[Panel<'_>]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    let width = 460 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        let (lo, hi) = panel
            .series
            .iter()
            .filter(|(_, s)| s.len() > 0)
            .fold((f64::MAX, f64::MIN), |(lo, hi), (_, s)| {
                (lo.min(s.percentile(0.0)), hi.max(s.percentile(100.0)))
            });
        let (lo, hi) = if lo <= hi {
            (
                10f64.powf(lo.max(1.0).log10().floor()),
                10f64.powf(hi.max(10.0).log10().ceil()),
            )
        } else {
            (10.0, 100_000.0)
        };
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("hand-off latency, µs (log)")
            .y_desc("fraction of hand-offs ≤ x")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, sample)) in panel.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let p50 = sample.percentile(50.0);
            let p99 = sample.percentile(99.0);
            chart
                .draw_series(LineSeries::new(sample.cdf(400), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!("{name}: p50 {p50:.0} µs, p99 {p99:.0} µs"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
