"""Renderings of a CompareResult: JSON (with a published schema), Markdown for pull requests, and a
self-contained HTML page with plots."""

__all__ = ["json_report", "markdown", "html", "plots", "atomic"]
