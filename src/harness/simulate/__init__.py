"""``korral simulate``: a small cluster scheduled live, its runs, report, chart and recorded histories."""
