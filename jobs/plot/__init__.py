"""Pictures of runs: metrics.jsonl -> chart specs -> PNG (matplotlib) or interactive HTML (uPlot).

`charts.figure(runs)` is the one description of what is drawn; `png.py` and the HTML page (and
the dashboard, jobs/api/dashboard.py) each only render it.
"""
