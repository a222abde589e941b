//! Pictures of a run, drawn with `plotters` as SVG: the loss of the training and held-out
//! splits against the step with the held-out baselines, the held-out metrics against the step,
//! and a confusion matrix.

use plotters::prelude::*;


/// Colours of successive series (matplotlib's first ten).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// A plotting failure as an I/O error (the plots are written next to `metrics.jsonl`).
fn failed<E: std::fmt::Debug>(e: E) -> std::io::Error {
    std::io::Error::other(format!("cannot draw the plot: {e:?}"))
}

/// The range of `values` with a margin (a flat series gets a unit's height).
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = if hi - lo < 1e-9 { 0.5 } else { (hi - lo) * 0.05 };
    (lo - pad, hi + pad)
}

/// One chart of `curves` (name, points, dashed) against the step, with axes, ticks and a legend.
pub(crate) fn line_chart(title: &str, y_label: &str, curves: &[(String, Vec<(f64, f64)>, bool)], legend: SeriesLabelPosition) -> std::io::Result<String> {
    chart(title, None, y_label, curves, legend)
}

/// A chart of `curves` (name, points) of `y_label` against `x_label` (a trade-off: accuracy
/// against speed), the axes spanning the points.
pub fn xy_svg(title: &str, x_label: &str, y_label: &str, curves: &[(String, Vec<(f64, f64)>)]) -> std::io::Result<String> {
    let curves: Vec<(String, Vec<(f64, f64)>, bool)> = curves.iter().map(|(n, p)| (n.clone(), p.clone(), false)).collect();
    chart(title, Some(x_label), y_label, &curves, SeriesLabelPosition::LowerRight)
}

/// [`line_chart`] against the step (`x_label` `None`: from 0, whole numbers) or against
/// `x_label` over the points' span.
fn chart(title: &str, x_label: Option<&str>, y_label: &str, curves: &[(String, Vec<(f64, f64)>, bool)], legend: SeriesLabelPosition) -> std::io::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let xs = || curves.iter().flat_map(|c| c.1.iter().map(|p| p.0));
        let (x_min, x_max) = match x_label {
            None => (0.0, xs().fold(1.0, f64::max)),
            Some(_) => span(xs()),
        };
        let (y_min, y_max) = span(curves.iter().flat_map(|c| c.1.iter().map(|p| p.1)));
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x_min..x_max, y_min..y_max)
            .map_err(failed)?;
        // Steps are whole numbers.
        let step = |x: &f64| if x_label.is_none() { format!("{x:.0}") } else { format!("{x:.2}") };
        chart.configure_mesh().x_desc(x_label.unwrap_or("step")).y_desc(y_label).x_label_formatter(&step).light_line_style(WHITE.mix(0.0)).draw().map_err(failed)?;
        for (i, (name, points, dashed)) in curves.iter().enumerate() {
            if points.is_empty() {
                continue;
            }
            let colour = PALETTE[i % PALETTE.len()];
            let style = colour.stroke_width(2);
            let drawn = if *dashed {
                chart.draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, style)).map_err(failed)?
            } else {
                chart.draw_series(LineSeries::new(points.iter().copied(), style)).map_err(failed)?
            };
            drawn.label(name.as_str()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
            if !*dashed && points.len() <= 60 {
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled()))).map_err(failed)?;
            }
        }
        chart.configure_series_labels().position(legend).background_style(WHITE.mix(0.85)).border_style(BLACK).draw().map_err(failed)?;
        root.present().map_err(failed)?;
    }
    Ok(svg)
}

/// A confusion matrix as a heat map: `rows[true][predicted]` counts, classes `names`, each cell
/// shaded by its share of its true class and labelled with its count.
pub fn confusion_matrix_svg(names: &[String], rows: &[Vec<u64>]) -> std::io::Result<String> {
    let n = rows.len().max(1);
    let cell = (480 / n as u32).clamp(12, 64);
    let label_room = 12 + 7 * names.iter().map(|s| s.chars().count()).max().unwrap_or(1).min(24) as u32;
    let side = cell * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, ((side + label_room + 40).max(320), side + label_room + 60)).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("confusion matrix", ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(label_room)
            .y_label_area_size(label_room)
            .build_cartesian_2d(0f64..n as f64, n as f64..0f64)
            .map_err(failed)?;
        let name = |v: &f64| {
            let i = v.floor() as usize;
            if (v - v.floor() - 0.5).abs() < 1e-6 { names.get(i).map(|s| s.chars().take(24).collect()).unwrap_or_default() } else { String::new() }
        };
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(2 * n + 1)
            .y_labels(2 * n + 1)
            .x_label_formatter(&name)
            .y_label_formatter(&name)
            .x_desc("predicted")
            .y_desc("true")
            .draw()
            .map_err(failed)?;
        for (t, row) in rows.iter().enumerate() {
            let total = row.iter().sum::<u64>().max(1) as f64;
            for (p, &count) in row.iter().enumerate() {
                let share = count as f64 / total;
                let shade = RGBColor((255.0 - 224.0 * share) as u8, (255.0 - 136.0 * share) as u8, (255.0 - 75.0 * share) as u8);
                let (x, y) = (p as f64, t as f64);
                chart.draw_series(std::iter::once(Rectangle::new([(x, y), (x + 1.0, y + 1.0)], shade.filled()))).map_err(failed)?;
                let ink = if share > 0.5 { &WHITE } else { &BLACK };
                let style = ("sans-serif", (cell / 3).clamp(8, 16)).into_font().color(ink).pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Center,
                ));
                chart.draw_series(std::iter::once(Text::new(count.to_string(), (x + 0.5, y + 0.5), style))).map_err(failed)?;
            }
        }
        root.present().map_err(failed)?;
    }
    Ok(svg)
}
