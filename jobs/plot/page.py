"""A figure as one self-contained interactive HTML file (uPlot and our charts.js inlined)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parent.parent / "api" / "static"


def standalone_html(figure: dict[str, Any], title: str) -> str:
    uplot_js = (STATIC / "uPlot.iife.min.js").read_text()
    uplot_css = (STATIC / "uPlot.min.css").read_text()
    charts_js = (STATIC / "charts.js").read_text()
    style = (STATIC / "dashboard.css").read_text()
    # `</` inside the JSON would end the script element early.
    data = json.dumps(figure).replace("</", "<\\/")
    legend = "".join(
        f'<li><span class="legend-swatch" style="background:{html.escape(r["color"])}"></span>'
        f"{html.escape(r['label'])} ({r['points']} points)</li>"
        for r in figure["runs"]
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{uplot_css}</style><style>{style}</style></head>
<body><h1>{html.escape(title)}</h1><ul>{legend}</ul><div id="charts"></div>
<script type="application/json" id="trainstack-figure">{data}</script>
<script>{uplot_js}</script><script>{charts_js}</script></body></html>
"""
