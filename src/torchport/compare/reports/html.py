"""A self-contained HTML page of a comparison: verdict, tables and inline SVG plots; no external
files, scripts or fonts, so it can be attached to a CI run and opened anywhere."""

from __future__ import annotations

from pathlib import Path

__all__ = ["render_html", "write_html"]


def render_html(result) -> str:
    """The page as one HTML string."""
    import jinja2

    from torchport.compare.reports.markdown import format_bytes
    from torchport.compare.reports.plots import plots_available, render_plots

    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("torchport.compare", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
    )
    environment.filters["bytes"] = format_bytes
    environment.filters["num"] = lambda value, digits=3: "n/a" if value is None else f"{value:.{digits}g}"
    template = environment.get_template("report.html.j2")
    return template.render(
        result=result,
        document=result.to_dict(),
        plots={name: jinja2.utils.markupsafe.Markup(svg) for name, svg in render_plots(result).items()},
        plots_available=plots_available(),
    )


def write_html(result, path: str | Path) -> Path:
    """Write the page to `path` atomically."""
    path = Path(path)
    from torchport.fileio import atomic_write

    atomic_write(path, render_html(result))
    return path
