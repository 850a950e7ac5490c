"""HTML reports with plots."""

from .html import render_report

__all__ = ["render_report"]
