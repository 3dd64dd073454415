// Draws trainstack figures (jobs/plot/charts.py: {runs, charts: [{id, title, x_label,
// y_label, series: [{label, color, dash, x, y}]}]}) with uPlot. Used by the dashboard (the
// figure is fetched from data-figure-url, and re-fetched every data-poll-ms while the run is
// live) and by `trainstack plot -o out.html` (the figure is inline in #trainstack-figure).
"use strict";
(function () {
  const plots = {};
  window.trainstackPlots = plots;

  function chartData(chart) {
    const tables = chart.series.map((s) => [s.x, s.y]);
    return tables.length === 1 ? tables[0] : uPlot.join(tables);
  }

  function chartWidth(root) {
    return Math.max(320, Math.min(560, root.clientWidth - 16));
  }

  function draw(root, figure) {
    window.trainstackFigure = figure;
    for (const chart of figure.charts) {
      let box = root.querySelector(`[data-chart="${chart.id}"]`);
      if (!box) {
        box = document.createElement("div");
        box.className = "chart";
        box.dataset.chart = chart.id;
        root.appendChild(box);
      }
      if (plots[chart.id]) {
        plots[chart.id].destroy();
        delete plots[chart.id];
      }
      box.textContent = "";
      if (!chart.series.length) {
        box.textContent = `${chart.title}: no points yet`;
        box.classList.add("empty");
        continue;
      }
      box.classList.remove("empty");
      const opts = {
        title: chart.title,
        width: chartWidth(root),
        height: 260,
        scales: { x: { time: false } },
        axes: [{ label: chart.x_label }, { label: chart.y_label }],
        series: [{ label: chart.x_label }].concat(
          chart.series.map((s) => ({
            label: s.label,
            stroke: s.color,
            width: 1.5,
            dash: s.dash ? [6, 4] : undefined,
            spanGaps: true,
            // Evaluation: dashed, a marker on every point (see jobs/plot/charts.py).
            points: { show: Boolean(s.markers) || s.x.length < 60, size: s.markers ? 7 : 5 },
          }))
        ),
      };
      plots[chart.id] = new uPlot(opts, chartData(chart), box);
    }
  }

  async function fetchAndDraw(root) {
    // Points beyond the chart's pixels would not show: the server cuts each series to them.
    const pixels = Math.round(chartWidth(root) * (window.devicePixelRatio || 1));
    const url = `${root.dataset.figureUrl}&width=${Math.max(100, Math.min(4000, pixels))}`;
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) {
      root.dataset.error = `${response.status}`;
      return null;
    }
    const figure = await response.json();
    draw(root, figure);
    root.dataset.loaded = String(Number(root.dataset.loaded || 0) + 1);
    return figure;
  }

  function boot() {
    for (const root of document.querySelectorAll("[data-figure-url]")) {
      const poll = Number(root.dataset.pollMs || 0);
      const tick = async () => {
        const figure = await fetchAndDraw(root);
        if (poll > 0 && (!figure || figure.live !== false)) setTimeout(tick, poll);
      };
      tick();
    }
    const inline = document.getElementById("trainstack-figure");
    if (inline) {
      const root = document.getElementById("charts");
      draw(root, JSON.parse(inline.textContent));
      root.dataset.loaded = "1";
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
